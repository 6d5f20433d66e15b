"""Batched sampling: greedy, temperature, top-k, top-p, min-p, per-request seeds.

Penalties and logit bias (sampling_params.py) are applied to the logits first, batched over the
rows that ask for them: one scatter builds every row's token counts.

Randomness uses the exponential race (argmax of p / q with q ~ Exp(1)), which samples exactly
from p. A seeded request draws q from its own generator keyed by (seed, output index), so its
tokens do not depend on which other requests share the batch, nor on speculation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from inference.engine.request import TokenLogprob
from inference.engine.sampling_params import SamplingParams


@dataclass
class SampleRow:
    params: SamplingParams
    output_index: int  # index of the token being sampled within the request's output
    forced: Optional[int] = None  # token that must be chosen (reasoning budget)
    banned: Optional[int] = None  # token that may not be chosen
    tokens: Optional[list[int]] = None  # prompt + output so far (needed when params.penalized)
    prompt_len: int = 0


def _seeded_noise(seed: int, index: int, vocab: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed((seed * 1_000_003 + index) % (2**63))
    return torch.empty(vocab).exponential_(generator=gen)


def _to_device(values, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Host values -> a device tensor without a host sync: on CUDA through pinned memory and a
    non_blocking copy (a plain copy from pageable memory synchronizes the stream)."""
    t = values if isinstance(values, torch.Tensor) else torch.tensor(values, dtype=dtype)
    if device.type == "cuda":
        return t.pin_memory().to(device, non_blocking=True)
    return t.to(device)


@dataclass
class SampledRows:
    """One sampling call's results where the logits live; nothing has been read on the host yet."""

    tokens: torch.Tensor  # [M] long
    top_n: dict[int, int]  # row -> params.logprobs, for the rows that asked for logprobs
    chosen: Optional[torch.Tensor] = None  # [len(top_n)] each such row's logprob of its token
    top_values: Optional[torch.Tensor] = None  # [len(top_n), max n] its alternatives
    top_ids: Optional[torch.Tensor] = None

    def to_host(self) -> "SampledRows":
        """Queue the copy to the host (non_blocking: pinned memory on CUDA; wait on an event
        recorded after this before `read`)."""
        if self.tokens.device.type == "cpu":
            return self
        move = lambda t: None if t is None else t.to("cpu", non_blocking=True)  # noqa: E731
        return SampledRows(move(self.tokens), self.top_n, move(self.chosen), move(self.top_values), move(self.top_ids))

    def read(self) -> tuple[list[int], list[Optional[TokenLogprob]]]:
        """Tokens and logprobs as Python values: the host read (a sync where they are on a device)."""
        token_list = self.tokens.tolist()
        logprobs: list[Optional[TokenLogprob]] = [None] * len(token_list)
        if self.top_n:
            chosen, top_v, top_i = self.chosen.tolist(), self.top_values.tolist(), self.top_ids.tolist()
            for j, (i, n) in enumerate(self.top_n.items()):
                top = list(zip(top_i[j][:n], top_v[j][:n]))
                logprobs[i] = TokenLogprob(token_id=token_list[i], logprob=chosen[j], top=top)
        return token_list, logprobs


def sample(logits: torch.Tensor, rows: list[SampleRow],
           grammar_mask: Optional[torch.Tensor] = None) -> tuple[list[int], list[Optional[TokenLogprob]]]:
    """logits [M, V] (any dtype, any device) -> one token per row, plus logprobs where asked.
    `grammar_mask` [M, ceil(V/32)] int32 (inference/grammar/matcher.py): bit-packed allowed tokens
    per row, applied to every row in one kernel call; None when no row is constrained."""
    return sample_tensors(logits, rows, grammar_mask).read()


def sample_tensors(logits: torch.Tensor, rows: list[SampleRow],
                   grammar_mask: Optional[torch.Tensor] = None) -> SampledRows:
    """`sample` up to the host read: every op stays on the logits' device and none waits for it
    (the overlap scheduler launches the next step before reading these; inference/engine/overlap.py).
    Seeded rows' noise is drawn on the host (the CPU generator keyed by seed and output index, so
    a seeded request's tokens are the same on every device and path) and copied over."""
    logits = logits.float()
    m, vocab = logits.shape
    dev = logits.device
    masked = logits.clone()
    adjust = [i for i, r in enumerate(rows) if r.params.penalized or r.params.logit_bias]
    if adjust:
        masked[adjust] = _penalized(masked[adjust], [rows[i] for i in adjust])
    if grammar_mask is not None:
        from inference.grammar.matcher import apply_mask

        apply_mask(masked, grammar_mask)
    for i, row in enumerate(rows):
        if row.banned is not None:
            masked[i, row.banned] = float("-inf")
        if row.forced is not None:
            masked[i].fill_(float("-inf"))
            masked[i, row.forced] = 0.0

    tokens = masked.argmax(dim=-1)
    random_rows = [i for i, r in enumerate(rows) if not r.params.greedy and r.forced is None]
    if random_rows:
        idx = _to_device(random_rows, torch.long, dev)
        sub = masked.index_select(0, idx)
        params = [rows[i].params for i in random_rows]
        temp = _to_device([p.temperature for p in params], torch.float32, dev)
        top_k = _to_device([p.top_k or vocab for p in params], torch.long, dev)
        top_p = _to_device([p.top_p for p in params], torch.float32, dev)
        min_p = _to_device([p.min_p for p in params], torch.float32, dev)
        probs = _filtered_probs(sub / temp[:, None], top_k, top_p, min_p)
        noise = torch.empty_like(probs)
        unseeded = [j for j, p in enumerate(params) if p.seed is None]
        if unseeded:
            fresh = torch.empty(len(unseeded), vocab, device=dev).exponential_()
            noise.index_copy_(0, _to_device(unseeded, torch.long, dev), fresh)
        seeded = [j for j, p in enumerate(params) if p.seed is not None]
        if seeded:
            drawn = torch.stack([_seeded_noise(params[j].seed, rows[random_rows[j]].output_index, vocab) for j in seeded])
            noise.index_copy_(0, _to_device(seeded, torch.long, dev), _to_device(drawn, torch.float32, dev))
        tokens.index_copy_(0, idx, (probs / noise).argmax(dim=-1))

    top_n = {i: r.params.logprobs for i, r in enumerate(rows) if r.params.logprobs is not None}
    if not top_n:
        return SampledRows(tokens, top_n)
    want = _to_device(list(top_n), torch.long, dev)
    lp = torch.log_softmax(logits.index_select(0, want), dim=-1)
    chosen = lp.gather(1, tokens.index_select(0, want)[:, None])[:, 0]
    top_v, top_i = lp.topk(max(1, max(top_n.values())), dim=-1)
    return SampledRows(tokens, top_n, chosen, top_v, top_i)


def _penalized(logits: torch.Tensor, rows: list[SampleRow]) -> torch.Tensor:
    """logits [R, V] of rows with penalties or bias -> adjusted logits (see sampling_params.py)."""
    r, vocab = logits.shape
    dev = logits.device
    penalized = [j for j, row in enumerate(rows) if row.params.penalized]
    if penalized:
        seqs = [rows[j].tokens or [] for j in penalized]
        width = max(1, max(len(t) for t in seqs))
        # Padding goes to an extra column that is dropped, so one scatter serves every row.
        ids = torch.full((len(penalized), width), vocab, dtype=torch.long)
        in_output = torch.zeros(len(penalized), width, dtype=torch.bool)
        for k, (j, toks) in enumerate(zip(penalized, seqs)):
            ids[k, : len(toks)] = torch.tensor(toks, dtype=torch.long)
            in_output[k, rows[j].prompt_len : len(toks)] = True
        ids, in_output = ids.to(dev), in_output.to(dev)
        counts = torch.zeros(len(penalized), vocab + 1, device=dev).scatter_add_(1, ids, in_output.float())[:, :vocab]
        seen = torch.zeros(len(penalized), vocab + 1, dtype=torch.bool, device=dev).scatter_(1, ids, True)[:, :vocab]
        p = [rows[j].params for j in penalized]
        rep = torch.tensor([x.repetition_penalty for x in p], device=dev)[:, None]
        freq = torch.tensor([x.frequency_penalty for x in p], device=dev)[:, None]
        pres = torch.tensor([x.presence_penalty for x in p], device=dev)[:, None]
        sub = logits[penalized]
        sub = torch.where(seen, torch.where(sub > 0, sub / rep, sub * rep), sub)
        sub = sub - freq * counts - pres * (counts > 0).float()
        logits[penalized] = sub
    for j, row in enumerate(rows):
        bias = row.params.logit_bias
        if bias:
            known = {t: b for t, b in bias.items() if t < vocab}
            if known:
                cols = torch.tensor(list(known), device=dev)
                logits[j, cols] += torch.tensor(list(known.values()), device=dev)
    return logits


def _filtered_probs(scaled: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor, min_p: torch.Tensor) -> torch.Tensor:
    """Softmax after top-k, top-p (nucleus, keeping at least one token) and min-p filters."""
    sorted_logits, order = scaled.sort(dim=-1, descending=True)
    ranks = torch.arange(scaled.shape[-1], device=scaled.device)[None, :]
    drop = ranks >= top_k[:, None]
    sorted_probs = torch.softmax(sorted_logits.masked_fill(drop, float("-inf")), dim=-1)
    before = sorted_probs.cumsum(dim=-1) - sorted_probs
    drop |= before >= top_p[:, None]
    drop |= sorted_probs < min_p[:, None] * sorted_probs[:, :1]
    drop[:, 0] = False
    sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
    filtered = torch.full_like(scaled, float("-inf")).scatter(-1, order, sorted_logits)
    return torch.softmax(filtered, dim=-1)
