"""Turns scheduled items into `ForwardBatch`es and runs the target model and its MTP layer.

Every call is a command (runner_commands.py) that `execute` carries out, so a tensor-parallel
follower can replay the leader's calls exactly (parallel/follower.py). The runner keeps the
tensors later commands refer to: the last target hidden states, the last MTP pass's hidden
states and the last draft selection.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Callable

import torch

from inference.engine.runner_commands import (
    Command, CopyPages, Heartbeat, HiddenRef, HostCopy, MtpSpanSpec, MtpStep, ReplicaDigest, SetupDecodeGraphs,
    TargetStep,
)
from inference.engine.scheduler import ScheduledItem
from inference.forward_batch import ForwardBatch


@dataclass
class TargetOutput:
    logits: torch.Tensor | None  # [M, V] rows for every item's trailing num_logits positions, item order
    logit_rows: list[int]  # per item: first row in `logits` (valid only when num_logits > 0)
    hidden: torch.Tensor | None  # [N, H] every fed token's hidden state (only with MTP)
    token_rows: list[int]  # per item: first row of its tokens in `hidden`


def build_forward_batch(tokens: list[list[int]], starts: list[int], pages: list[list[int]], logit_rows: list[int],
                        device) -> ForwardBatch:
    """Per sequence: new tokens, the position of the first, its page ids; plus the flat rows
    whose logits are wanted -> a ForwardBatch on `device`."""
    n_per = [len(t) for t in tokens]
    starts_t = torch.tensor(starts, dtype=torch.long)
    lens_t = torch.tensor(n_per, dtype=torch.long)
    qsl = torch.zeros(len(tokens) + 1, dtype=torch.long)
    qsl[1:] = lens_t.cumsum(0)
    seq_of = torch.repeat_interleave(torch.arange(len(tokens)), lens_t)
    positions = starts_t[seq_of] + (torch.arange(int(qsl[-1])) - qsl[seq_of])
    width = max(len(p) for p in pages)
    table = torch.full((len(pages), width), -1, dtype=torch.long)
    for i, p in enumerate(pages):
        table[i, :len(p)] = torch.tensor(p, dtype=torch.long)
    flat = [t for seq in tokens for t in seq]
    return ForwardBatch(
        input_ids=torch.tensor(flat, dtype=torch.long, device=device),
        positions=positions.to(device),
        query_start_loc=qsl.to(device),
        seq_lens=(starts_t + lens_t).to(device),
        block_table=table.to(device),
        logits_indices=torch.tensor(logit_rows, dtype=torch.long, device=device),
    )


def resolve_future_ids(ids: torch.Tensor, future: torch.Tensor) -> torch.Tensor:
    """Token ids with every -(i + 1) replaced by future[i], on the device (no host sync)."""
    rows = (-ids - 1).clamp(0, future.shape[0] - 1)
    return torch.where(ids < 0, future.index_select(0, rows), ids)


# MTP input for one sequence: positions [start, start+len(next_ids)), each paired with the token
# that follows it and the target (or previous draft's) hidden state at it, by reference.
MtpSpan = MtpSpanSpec


def target_step(items: list[ScheduledItem], want_hidden: bool) -> tuple[TargetStep, list[int], list[int]]:
    """The command for a forward over `items`, with each item's first logit row and first token row."""
    rows, logit_rows, token_rows, offset = [], [], [], 0
    for it in items:
        token_rows.append(offset)
        logit_rows.append(len(rows))
        n = len(it.token_ids)
        rows.extend(range(offset + n - it.num_logits, offset + n))
        offset += n
    step = TargetStep([list(it.token_ids) for it in items], [it.start for it in items],
                      [list(it.seq.pages) for it in items], rows, want_hidden)
    return step, logit_rows, token_rows


class ModelRunner:
    def __init__(self, model, cache, page_size: int, fence: Callable[[], None] = lambda: None, host=None):
        self.model = model
        self.cache = cache
        self.page_size = page_size
        self.device = model.device
        # Waits for host-tier copies (HostTier.fence): a forward reads restored pages and writes
        # pages whose spill may still be in flight.
        self.fence = fence
        self.host = host  # HostTier whose copies HostCopy commands run (None: no host tier)
        self._target_hidden: torch.Tensor | None = None
        self._mtp_hidden: torch.Tensor | None = None
        self._draft_selection = None
        # Uniform steps (decode, MTP verification and drafts) through fixed buffers, eagerly or as
        # graphs (decode_graphs.py); None until set up: every step takes the general forward.
        self.graphs = None
        # Overlap scheduling (overlap.py): the last overlapped step's sampled tokens, on the device.
        # NOTE: a TargetStep token id -(i + 1) stands for row i of them (a "future" token the host
        # has not read yet); the forward resolves it on the device.
        self.sampled_tokens: torch.Tensor | None = None
        self.barrier: Callable[[], None] = lambda: None  # waits for a step launched on a worker thread

    def _batch(self, tokens: list[list[int]], starts: list[int], pages: list[list[int]], logit_rows: list[int]) -> ForwardBatch:
        return build_forward_batch(tokens, starts, pages, logit_rows, self.device)

    # ---- the engine's calls (each one command) ----
    def run_target(self, items: list[ScheduledItem], want_hidden: bool) -> TargetOutput:
        step, logit_rows, token_rows = target_step(items, want_hidden)
        out = self.execute(step)
        return TargetOutput(out.logits, logit_rows, out.all_hidden_states, token_rows)

    def run_mtp(self, spans: list[MtpSpan], reuse_rows: list[int] | None = None):
        """One MTP pass over every span; returns (logits, pre-norm hidden) at each span's last
        position and the pass's per-sequence selection (None when every key was visible). Writes the MTP layer's KV for every position of every span (with reuse_rows,
        see Glm5ForCausalLM.mtp_forward, its latent only); a pass that runs its indexer becomes
        the selection later `reuse_rows` index."""
        out = self.execute(MtpStep(list(spans), reuse_rows))
        return out.logits, out.hidden_states, out.draft_selection

    def copy_pages(self, src: list[int], dst: list[int]) -> None:
        self.execute(CopyPages(src, dst))

    def host_copy(self, direction: str, src: list[int], dst: list[int]) -> None:
        self.execute(HostCopy(direction, src, dst))

    def setup_decode_graphs(self, settings) -> None:
        """Serve uniform steps through decode_graphs.DecodeGraphs (every rank builds the same graphs)."""
        self.execute(SetupDecodeGraphs(settings))

    # ---- what every rank runs ----
    def execute(self, cmd: Command):
        self.barrier()
        if isinstance(cmd, TargetStep):
            return self._target(cmd)
        if isinstance(cmd, MtpStep):
            return self._mtp(cmd)
        if isinstance(cmd, CopyPages):
            self.fence()  # dst may be a page whose spill to the host is still in flight
            self.cache.copy_pages(torch.tensor(cmd.src), torch.tensor(cmd.dst))
        elif isinstance(cmd, HostCopy):
            self.host.copy(cmd.direction, cmd.src, cmd.dst)
        elif isinstance(cmd, ReplicaDigest):
            return self._replica_digests()
        elif isinstance(cmd, SetupDecodeGraphs):
            from inference.engine.decode_graphs import DecodeGraphs

            self.graphs = DecodeGraphs(self.model, self.cache, cmd.settings)
            self.graphs.prepare()
        elif not isinstance(cmd, Heartbeat):
            raise TypeError(f"model runner: unknown command {cmd!r}")
        return None

    def replica_digests(self) -> list[str]:
        """One digest of the replicated state per rank (rank order); all equal when healthy."""
        return self.execute(ReplicaDigest())

    def _replica_digests(self) -> list[str]:
        h = hashlib.sha256()
        sel = self._draft_selection
        rows = [] if sel is None else ([sel.rows.positions, sel.rows.valid] if hasattr(sel.rows, "positions") else [sel.rows])
        for t in [*self.cache.latent, *self.cache.indexer.values(), *rows]:
            h.update(t.detach().contiguous().cpu().view(torch.uint8).numpy().tobytes())
        mine = torch.tensor(list(h.digest()[:16]), dtype=torch.uint8).to(torch.int32)
        gathered = self.model.parallel.comm.all_gather(mine.to(self.device), dim=0).cpu().view(-1, 16)
        return [bytes(row.to(torch.uint8).tolist()).hex() for row in gathered]

    def _target(self, cmd: TargetStep):
        self.fence()
        out = None
        # Future ids only ever stand alone (a decode row's one token) and only after an overlapped
        # step: a check per sequence, not per token, and none in other engines.
        future = self.sampled_tokens if self.sampled_tokens is not None and \
            any(len(ids) == 1 and ids[0] < 0 for ids in cmd.tokens) else None
        if self.graphs is not None:
            out = self.graphs.target(cmd.tokens, cmd.starts, cmd.pages, len(cmd.logit_rows), cmd.want_hidden,
                                     future=future)
        if out is None:
            batch = self._batch(cmd.tokens, cmd.starts, cmd.pages, cmd.logit_rows)
            if future is not None:
                batch.input_ids = resolve_future_ids(batch.input_ids, future)
            out = self.model.forward_batch(batch, self.cache, return_all_hidden=cmd.want_hidden)
        self._target_hidden = out.all_hidden_states
        return out

    def _resolve(self, ref: HiddenRef) -> torch.Tensor:
        source = self._target_hidden if ref.source == "target" else self._mtp_hidden
        return source[ref.row:ref.row + ref.count]

    def _mtp(self, cmd: MtpStep):
        if self.graphs is not None:
            self.fence()
            out = self.graphs.mtp(cmd.spans, cmd.reuse_rows, self._target_hidden, self._mtp_hidden,
                                  self._draft_selection)  # fmt: skip
            if out is not None:
                self._mtp_hidden = out.hidden_states
                if cmd.reuse_rows is None:
                    self._draft_selection = out.draft_selection
                return out
        last_rows, offset = [], 0
        for s in cmd.spans:
            offset += len(s.next_ids)
            last_rows.append(offset - 1)
        batch = self._batch([s.next_ids for s in cmd.spans], [s.start for s in cmd.spans],
                            [s.pages for s in cmd.spans], last_rows)
        prev = torch.cat([self._resolve(s.hidden) for s in cmd.spans], dim=0)
        reuse = None if cmd.reuse_rows is None else self._draft_selection.sequences_of(cmd.reuse_rows)
        self.fence()
        out = self.model.mtp_forward(batch, prev, self.cache, reuse_selection=reuse)
        self._mtp_hidden = out.hidden_states
        if reuse is None:
            self._draft_selection = out.draft_selection
        return out
