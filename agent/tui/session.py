"""Chat sessions on disk, written as they happen, so a crash or a kill loses nothing:

    $HORIZON_HOME/sessions/<id>/meta.json     id, repository, model, title, times
    $HORIZON_HOME/sessions/<id>/events.jsonl  every agent event plus the UI's own records

`horizon chat --resume [ID]` replays events.jsonl to rebuild both the view and the conversation.
"""

from __future__ import annotations

import json
import os
import secrets
import threading
import time
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ValidationError

from agent.events import Event, parse_event


class UserTurn(BaseModel):
    """What the user typed (the model saw it with the attached files appended)."""

    type: Literal["ui_user"] = "ui_user"
    text: str
    attachments: list[str] = []


class Notice(BaseModel):
    """A line the UI showed (command output, interruptions) that is not an agent event."""

    type: Literal["ui_notice"] = "ui_notice"
    text: str
    format: Literal["text", "markdown", "diff"] = "text"
    kind: Literal["info", "warning", "error", "success"] = "info"


Record = Event | UserTurn | Notice


class SessionMeta(BaseModel):
    id: str
    repo: str
    model: str
    title: str = ""
    created: float
    updated: float


def horizon_home() -> Path:
    return Path(os.environ.get("HORIZON_HOME") or Path.home() / ".horizon")


def parse_record(line: str) -> Record | None:
    try:
        data = json.loads(line)
        kind = data.get("type")
        if kind == "ui_user":
            return UserTurn.model_validate(data)
        if kind == "ui_notice":
            return Notice.model_validate(data)
        return parse_event(data)
    except (json.JSONDecodeError, ValidationError, AttributeError):
        return None  # a torn last line after a kill


class Session:
    def __init__(self, folder: Path, meta: SessionMeta):
        self.folder = folder
        self.meta = meta
        self._lock = threading.Lock()

    @property
    def id(self) -> str:
        return self.meta.id

    @property
    def events_path(self) -> Path:
        return self.folder / "events.jsonl"

    def append(self, record: Record) -> None:
        line = record.model_dump_json() + "\n"
        with self._lock, self.events_path.open("a", encoding="utf-8") as f:
            f.write(line)
            f.flush()
        if isinstance(record, UserTurn) and not self.meta.title:
            self.meta.title = record.text.strip().splitlines()[0][:80] if record.text.strip() else ""
            self.save_meta()

    def records(self) -> list[Record]:
        if not self.events_path.exists():
            return []
        lines = self.events_path.read_text(encoding="utf-8").splitlines()
        return [r for r in map(parse_record, lines) if r is not None]

    def save_meta(self) -> None:
        self.meta.updated = time.time()
        tmp = self.folder / "meta.json.tmp"
        tmp.write_text(self.meta.model_dump_json(indent=2), encoding="utf-8")
        tmp.replace(self.folder / "meta.json")


class SessionStore:
    def __init__(self, root: Path | None = None):
        self.root = Path(root) if root else horizon_home() / "sessions"

    def create(self, repo: str, model: str, session_id: str | None = None) -> Session:
        session_id = session_id or time.strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(2)
        folder = self.root / session_id
        folder.mkdir(parents=True, exist_ok=False)
        now = time.time()
        session = Session(folder, SessionMeta(id=session_id, repo=repo, model=model, created=now, updated=now))
        session.save_meta()
        session.events_path.touch()
        return session

    def list(self) -> list[SessionMeta]:
        metas = []
        for meta_file in self.root.glob("*/meta.json"):
            try:
                metas.append(SessionMeta.model_validate_json(meta_file.read_text(encoding="utf-8")))
            except (ValidationError, OSError):
                continue
        return sorted(metas, key=lambda m: m.updated, reverse=True)

    def open(self, session_id: str | None = None) -> Session:
        """A saved session by id (or unique id prefix); the most recent one when no id is given."""
        metas = self.list()
        if not metas:
            raise LookupError(f"no saved sessions under {self.root}")
        if session_id is None:
            meta = metas[0]
        else:
            matches = [m for m in metas if m.id == session_id] or [m for m in metas if m.id.startswith(session_id)]
            if len(matches) != 1:
                found = "no session" if not matches else f"{len(matches)} sessions"
                raise LookupError(f"{found} matching {session_id!r} under {self.root}")
            meta = matches[0]
        return Session(self.root / meta.id, meta)
