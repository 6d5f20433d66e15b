"""The model runner's commands: everything that touches the model or the KV pages, as plain data.

The engine drives its `ModelRunner` through these (directly, or through `DistributedRunner`,
which first broadcasts each command so tensor-parallel followers replay it on their shards).
They hold Python lists only, never tensors: every rank already holds the tensors a command refers
to (the last target / MTP hidden states, the last draft selection), because after each
all-reduce those are bit-identical on all ranks; `HiddenRef` and `reuse_rows` name them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class HiddenRef:
    """Rows [row, row + count) of the runner's last target forward (all hidden states) or of its
    last MTP pass (the pre-norm hidden state at each span's last position)."""

    source: Literal["target", "mtp"]
    row: int
    count: int


@dataclass(frozen=True)
class TargetStep:
    tokens: list[list[int]]
    starts: list[int]
    pages: list[list[int]]
    logit_rows: list[int]
    want_hidden: bool


@dataclass(frozen=True)
class MtpSpanSpec:
    pages: list[int]
    start: int
    next_ids: list[int]
    hidden: HiddenRef


@dataclass(frozen=True)
class MtpStep:
    spans: list[MtpSpanSpec]
    # Attend over these rows (one per span) of the last MTP pass that ran its indexer, instead of
    # running it (index_share_for_mtp_iteration); None: run the MTP indexer.
    reuse_rows: list[int] | None = None


@dataclass(frozen=True)
class CopyPages:
    """Device page copy-on-write (the radix cache's partial-page hits)."""

    src: list[int]
    dst: list[int]


@dataclass(frozen=True)
class HostCopy:
    """A host-tier copy: "spill" device -> host pages, "load" host -> device pages."""

    direction: Literal["spill", "load"]
    src: list[int]
    dst: list[int]


@dataclass(frozen=True)
class SetupDecodeGraphs:
    """Serve uniform steps through fixed buffers / graphs (decode_graphs.GraphSettings); sent once
    at start-up, so every rank captures the same graphs in the same order (their collectives match)."""

    settings: object  # decode_graphs.GraphSettings


@dataclass(frozen=True)
class Handshake:
    """Sent once after every rank has loaded: the leader's cache sizes, for identical pages."""

    num_pages: int
    page_size: int
    kv_cache_dtype: str
    host_pages: int


@dataclass(frozen=True)
class ReplicaDigest:
    """Every rank hashes its replicated state (KV latent and indexer pages, the last draft
    selection) and the digests are gathered: they must be equal (the L1 replication check)."""


@dataclass(frozen=True)
class Heartbeat:
    """Sent while idle, so followers waiting for a command do not reach the collective timeout."""


@dataclass(frozen=True)
class Stop:
    pass


Command = TargetStep | MtpStep | CopyPages | HostCopy | ReplicaDigest | SetupDecodeGraphs | Heartbeat | Stop
