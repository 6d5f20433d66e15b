"""CyberGym's on-disk layouts: the task folder its generator writes, and the server-side data entry.

A generated task folder (`python -m cybergym.task.gen_task ... --difficulty levelN`) holds
`README.md`, `submit.sh` and the level's files:

    level0  repo-vul.tar.gz
    level1  + description.txt                      (CyberGym's default)
    level2  + error.txt                            (sanitizer output of the reference PoC)
    level3  + repo-fix.tar.gz, patch.diff

`submit.sh` posts the PoC with a metadata form holding `task_id` (possibly masked through
`mask_map.json`), `agent_id`, `checksum` = sha256(task_id + agent_id + salt) and `require_flag`.

The data entry (`<data>/arvo/<id>/`, `<data>/oss-fuzz/<id>/`) is what the generator copies from:
every file above plus the reference `poc`; the agent never gets it. Horizon also reads two files
of its own there, both optional: `build.sh` (an OSS-Fuzz-style build script, when the sources do
not carry one) and `metadata.json` (`fuzz_target`: the program the PoC is fed to), which CyberGym's
binary-only data also uses.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

DEFAULT_SALT = "CyberGym"  # cybergym.task.types.DEFAULT_SALT: the generator always uses it
LEVEL_FILES: dict[int, tuple[str, ...]] = {
    0: ("repo-vul.tar.gz",),
    1: ("repo-vul.tar.gz", "description.txt"),
    2: ("repo-vul.tar.gz", "description.txt", "error.txt"),
    3: ("repo-vul.tar.gz", "repo-fix.tar.gz", "error.txt", "description.txt", "patch.diff"),
}
FILE_MEANINGS = {
    "repo-vul.tar.gz": "source code of the vulnerable program",
    "repo-fix.tar.gz": "source code of the patched program",
    "error.txt": "the sanitizer output of the vulnerable program on a PoC that triggers the bug",
    "description.txt": "a description of the vulnerability",
    "patch.diff": "the diff of the commit that fixed it",
}
TASK_TYPES = ("arvo", "oss-fuzz", "oss-fuzz-latest")
_METADATA = re.compile(r"metadata=(\{.*?\})'", re.S)
_SERVER = re.compile(r"curl\s+(?:-\S+\s+)*-X\s+POST\s+(\S+?)/submit-vul")


class LayoutError(ValueError):
    """A task folder that does not have CyberGym's layout: names the file and the field."""

    def __init__(self, file: str, field: str | None, message: str):
        super().__init__(f"{file} [{field}]: {message}")
        self.file, self.field, self.message = file, field, message


def checksum(task_id: str, agent_id: str, salt: str = DEFAULT_SALT) -> str:
    return hashlib.sha256(f"{task_id}{agent_id}{salt}".encode()).hexdigest()


@dataclass(frozen=True)
class Submission:
    """What a generated submit.sh sends besides the PoC."""

    task_id: str
    agent_id: str
    checksum: str
    require_flag: bool = False
    server: str | None = None


def parse_submit_script(text: str) -> Submission:
    m = _METADATA.search(text)
    if not m:
        raise LayoutError("submit.sh", "metadata", "no `-F 'metadata={...}'` form field (not CyberGym's submit.sh)")
    try:
        meta = json.loads(m.group(1))
    except json.JSONDecodeError as exc:
        raise LayoutError("submit.sh", "metadata", f"invalid JSON: {exc}") from exc
    for key in ("task_id", "agent_id", "checksum"):
        if not isinstance(meta.get(key), str) or not meta[key]:
            raise LayoutError("submit.sh", f"metadata.{key}", f"expected a non-empty string, got {meta.get(key)!r}")
    server = _SERVER.search(text)
    return Submission(meta["task_id"], meta["agent_id"], meta["checksum"], bool(meta.get("require_flag", False)),
                      server.group(1) if server else None)


def is_task_folder(folder: Path) -> bool:
    submit = folder / "submit.sh"
    if not (submit.is_file() and (folder / "README.md").is_file() and (folder / "repo-vul.tar.gz").is_file()):
        return False
    return "/submit-vul" in submit.read_text(encoding="utf-8", errors="replace")


def infer_level(folder: Path) -> int:
    """The level whose file set the folder holds exactly (extra files of a higher level are errors)."""
    present = {name for name in FILE_MEANINGS if (folder / name).is_file()}
    for level in (3, 2, 1, 0):
        if set(LEVEL_FILES[level]) == present:
            return level
    best = max((lvl for lvl in LEVEL_FILES if set(LEVEL_FILES[lvl]) <= present), default=0)
    extra = sorted(present - set(LEVEL_FILES[best]))
    raise LayoutError(extra[0], "level", f"present, but level{best}'s other files are not: a level{best} "
                                         f"task has exactly {', '.join(LEVEL_FILES[best])}")


def _ancestors(folder: Path, depth: int = 4) -> list[Path]:
    return [p for p in [folder, *folder.parents][: depth + 1]]


def real_task_id(agent_task_id: str, folder: Path) -> str:
    """Unmask a masked id with the nearest `mask_map.json` (real id -> masked id), as the server does."""
    if ":" in agent_task_id:
        return agent_task_id
    for root in _ancestors(folder.parent):
        mask_map = root / "mask_map.json"
        if mask_map.is_file():
            reverse = {v: k for k, v in json.loads(mask_map.read_text(encoding="utf-8")).items()}
            if agent_task_id in reverse:
                return reverse[agent_task_id]
    raise LayoutError("submit.sh", "metadata.task_id",
                      f"{agent_task_id!r} is masked and no mask_map.json above the task maps it back")


def find_data_entry(task_id: str, folder: Path) -> Path | None:
    """`<data>/<type>/<id>/` for this task, in `data/` or directly in an ancestor of the task folder
    (a CyberGym data clone keeps them in `cybergym_data/data/`)."""
    kind, _, ident = task_id.partition(":")
    for root in _ancestors(folder.parent):
        for candidate in (root / "data" / kind / ident, root / kind / ident):
            if candidate.is_dir() and (candidate / "repo-vul.tar.gz").is_file() and candidate != folder:
                return candidate
    return None
