"""Remove sandbox containers (and allowlist sandboxes' egress networks) that crashed runs left
behind, found by their label."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
import time

from sandbox.constants import LABEL_KEY, LABEL_VALUE, RUN_LABEL_KEY
from sandbox.docker_client import connect, labelled_containers, remove_container


@dataclass(frozen=True)
class Removed:
    name: str
    run_id: str
    age_seconds: float
    kind: str = "container"  # or "network"


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
    # After the containers: a network cannot be removed while a container is attached to it.
    for net in client.api.networks(filters={"label": label}):
        age = now - _created(net.get("Created"))
        if age < older_than:
            continue
        try:
            client.api.remove_network(net["Id"])
        except Exception:  # noqa: BLE001 - gone already, or still in use by a live sandbox
            continue
        removed.append(Removed(net.get("Name", net["Id"][:12]), (net.get("Labels") or {}).get(RUN_LABEL_KEY, ""),
                               age, kind="network"))
    return removed


def _created(text) -> float:
    """Docker's network timestamps ('2026-12-01T04:12:35.123456789Z') -> Unix seconds (0 if unreadable)."""
    try:
        head, _, frac = str(text).rstrip("Z").partition(".")
        stamp = datetime.fromisoformat(head.split("+")[0] + "+00:00").timestamp()
        return stamp + float("0." + "".join(c for c in frac if c.isdigit())[:6] or 0)
    except ValueError:
        return 0.0


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

