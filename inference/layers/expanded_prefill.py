"""Which tokens of a step attend in the expanded MLA form on the kernel path, and that attention.

Decode steps and short chunks attend absorbed over each token's selected cache rows
(kernel_path.sparse_latent_attention): q_nope goes through W_UK into the latent space, the output
back through W_UV, and every selected 576-wide row is read once per query. A long chunk is cheaper
expanded: kv_b_proj runs once per key of its sequence (per-head k_nope and v), then it is plain
flash attention over 256-wide heads, each key block read once for a tile of queries
(kernels/mla_prefill.py). vLLM's MLA backends split a batch the same way (decode tokens absorbed,
prefill tokens expanded) and SGLang's DSA backend runs prefill expanded while no sequence has more
keys than index_topk, i.e. while the DSA selection is every visible key.

The rule (`plan`, mode "auto"), per sequence of the step: expanded when its chunk has more than
ABSORB_MAX_QUERY_LEN tokens (the native path's threshold, mla.py), it has at most index_topk keys
(then dense causal attention IS its sparse attention) and the expanded form costs fewer
multiply-adds (`expanded_is_cheaper`: a short chunk after a long cached prefix would pay kv_b_proj
for every cached key, and stays absorbed); while the expanded keys of the step fit in
EXPANDED_MAX_ELEMENTS. Every other token is absorbed. Mode "expanded" (tests) expands every
sequence, each token still attending only its DSA selection (as bit words over key positions).

The keys read are only those of the expanded sequences, gathered once per layer in the model
dtype (an FP8 cache dequantizes just those rows). Planning costs one host sync per layer, and only
in steps with a chunk longer than ABSORB_MAX_QUERY_LEN: decode steps never plan.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from inference.forward_batch import AttentionMetadata

# Sequences whose chunk has at most this many new tokens attend absorbed (decode, MTP verification).
ABSORB_MAX_QUERY_LEN = 8
# Largest expanded [keys, heads, nope + v] buffer of one layer (elements; 512 MiB in bf16).
EXPANDED_MAX_ELEMENTS = 1 << 28


@dataclass(frozen=True)
class MlaDims:
    heads: int  # this rank's heads
    rank: int  # kv_lora_rank
    rope: int
    nope: int
    v: int


@dataclass(frozen=True)
class ExpandedPlan:
    tokens: torch.Tensor  # [n] rows of the step attended expanded, in step order
    absorbed: torch.Tensor  # [N - n] the other rows, in step order
    key_slots: torch.Tensor  # [U] cache slots of the expanded sequences' keys, packed per sequence
    key_seq: torch.Tensor  # [U] sequence of each packed key
    key_pos: torch.Tensor  # [U] its position in that sequence
    key_start: torch.Tensor  # [B] packed row of each sequence's position 0 (0 for absorbed ones)
    with_selection: bool  # tokens may see more than index_topk keys: honour their DSA selection


def expanded_is_cheaper(q_lens: torch.Tensor, seq_lens: torch.Tensor, d: MlaDims) -> torch.Tensor:
    """Per sequence: fewer multiply-adds per head expanded than absorbed, for a chunk of q_lens
    new tokens ending at seq_lens keys that all see every earlier key (no selection)."""
    q, s = q_lens.double(), seq_lens.double()
    visible = s - (q - 1) / 2  # keys a token of the chunk sees, on average
    absorbed = q * (visible * (2 * d.rank + d.rope) + d.nope * d.rank + d.rank * d.v)
    expanded = s * d.rank * (d.nope + d.v) + q * visible * (d.nope + d.rope + d.v)
    return expanded < absorbed


def plan(meta: AttentionMetadata, mode: str, topk: int, dims: MlaDims) -> ExpandedPlan | None:
    """The step's expanded tokens and their keys, or None when every token attends absorbed."""
    if mode in ("absorbed", "sparse") or (mode == "auto" and meta.max_query_len <= ABSORB_MAX_QUERY_LEN):
        return None
    num_seqs = meta.seq_lens.shape[0]
    device = meta.seq_lens.device
    q_lens = torch.bincount(meta.seq_of_token, minlength=num_seqs)
    seq_lens = meta.seq_lens
    if mode == "expanded":
        chosen = torch.ones(num_seqs, dtype=torch.bool, device=device)
    else:
        chosen = (q_lens > ABSORB_MAX_QUERY_LEN) & (seq_lens <= topk) & expanded_is_cheaper(q_lens, seq_lens, dims)
        width = dims.heads * (dims.nope + dims.v)
        chosen &= torch.cumsum(torch.where(chosen, seq_lens, 0), 0) * width <= EXPANDED_MAX_ELEMENTS
    keys = torch.where(chosen, seq_lens, 0)
    on = chosen[meta.seq_of_token]
    n, total = torch.stack([on.sum(), keys.sum()]).tolist()  # NOTE: the plan's one host sync
    if n == 0:
        return None
    order = torch.argsort((~on).to(torch.uint8), stable=True)  # expanded rows first, each in step order
    key_start = torch.cumsum(keys, 0) - keys
    key_seq = torch.repeat_interleave(torch.arange(num_seqs, device=device), keys, output_size=total)
    key_pos = torch.arange(total, device=device) - key_start[key_seq]
    return ExpandedPlan(
        tokens=order[:n], absorbed=order[n:], key_slots=meta.key_slots[key_seq, key_pos], key_seq=key_seq,
        key_pos=key_pos, key_start=key_start, with_selection=mode == "expanded" and meta.max_seq_len > topk,
    )  # fmt: skip


def selection_positions(p: ExpandedPlan, meta: AttentionMetadata, slots: torch.Tensor) -> torch.Tensor:
    """Selected cache slots [n, K] of the plan's tokens -> their key positions (-1 = none), by a
    binary search of (sequence, slot) over the packed keys (a page may sit in several tables)."""
    key = p.key_seq * 2**32 + p.key_slots
    sorted_key, order = key.sort()
    want = meta.seq_of_token[p.tokens].unsqueeze(1) * 2**32 + slots.long()
    idx = torch.searchsorted(sorted_key, want.reshape(-1)).clamp(max=key.numel() - 1).view_as(want)
    hit = (sorted_key[idx] == want) & (slots >= 0)
    return torch.where(hit, p.key_pos[order[idx]], -1)


def attend(p: ExpandedPlan, q: torch.Tensor, latent_rows, kv_b_proj, meta: AttentionMetadata, slots: torch.Tensor,
           dims: MlaDims, scale: float, backend: str) -> torch.Tensor:  # fmt: skip
    """q [n, H, nope + rope] of the plan's tokens -> their attention output [n, H * v]."""
    from kernels.mla_prefill import mla_prefill_attention, selection_bits

    rows = latent_rows.gather(p.key_slots)  # [U, rank + rope] in the model dtype
    kv = kv_b_proj(rows[:, : dims.rank]).view(-1, dims.heads, dims.nope + dims.v)
    tokens = p.tokens
    bits = None
    if p.with_selection:
        bits = selection_bits(selection_positions(p, meta, slots[tokens]), meta.max_seq_len)
    out = mla_prefill_attention(
        q.to(rows.dtype), kv.to(rows.dtype), rows[:, dims.rank :], p.key_start, meta.seq_of_token[tokens],
        meta.positions[tokens], scale, dims.nope, bits, backend=backend,
    )  # fmt: skip
    return out.reshape(tokens.numel(), dims.heads * dims.v)
