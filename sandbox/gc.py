"""Remove sandbox containers that crashed runs left behind (found by their label)."""

from __future__ import annotations

from dataclasses import dataclass
import time

from sandbox.constants import LABEL_KEY, LABEL_VALUE, RUN_LABEL_KEY
from sandbox.docker_client import connect, labelled_containers, remove_container


@dataclass(frozen=True)
class Removed:
    name: str
    run_id: str
    age_seconds: float


def collect_garbage(*, older_than: float = 0.0, run_id: str | None = None, docker_client=None,
                    docker_host: str | None = None) -> list[Removed]:
    """Force-remove labelled sandbox containers at least `older_than` seconds old (optionally of one run)."""
    client = docker_client or connect(docker_host)
    # Match the value too: a plain `docker run` of an image could inherit a bare LABEL_KEY.
    ours = f"{LABEL_KEY}={LABEL_VALUE}"
    label = [ours] if run_id is None else [ours, f"{RUN_LABEL_KEY}={run_id}"]
    now = time.time()
    removed = []
    for row in labelled_containers(client, label):
        # `docker ps` rows give Created as Unix seconds.
        created = row.get("Created")
        age = now - created if isinstance(created, (int, float)) else float("inf")
        if age < older_than:
            continue
        if not remove_container(client, row["Id"]):
            continue  # removed concurrently by its own sandbox
        name = (row.get("Names") or [row["Id"][:12]])[0].lstrip("/")
        removed.append(Removed(name, (row.get("Labels") or {}).get(RUN_LABEL_KEY, ""), age))
    return removed


def parse_duration(text: str) -> float:
    """'90', '90s', '15m', '2h', '1d' -> seconds."""
    text = text.strip().lower()
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    try:
        if text and text[-1] in units:
            return float(text[:-1]) * units[text[-1]]
        return float(text)
    except ValueError:
        raise ValueError(f"older-than: expected a duration like 30s, 15m, 2h or 1d, got {text!r}") from None

