"""One fixed workload over a sharded model: prefill, decode, MTP with and without selection reuse.

Token ids are fixed (not sampled), so every rank runs the same steps whatever its logits (a
follower has none). Returns what a parity test compares: the leader's logits, every rank's
hidden states, KV cache contents and selections.
"""

from __future__ import annotations

import torch

from inference.forward_batch import ForwardBatch
from inference.layers.indexer import TopkSelection

PAGE = 8
PAGES = [[0, 1, 2, 3], [4, 5, 6, 7]]
PROMPTS = [list(range(3, 16)), [(7 * i + 5) % 400 + 3 for i in range(21)]]  # 13 and 21 tokens > index_topk 8


def _selection_tensors(sel) -> list[torch.Tensor]:
    if sel is None:
        return []
    rows = sel.rows
    return [rows.positions, rows.valid] if isinstance(rows, TopkSelection) else [rows]


def run_scenario(model, kernel_backend=None, kv_cache_dtype: str = "auto", attention_mode: str = "auto") -> dict:
    model.kernel_backend = kernel_backend
    model.attention_mode = attention_mode
    cache = model.new_cache(num_pages=8, page_size=PAGE, kv_cache_dtype=kv_cache_dtype)
    lens = [len(p) for p in PROMPTS]
    logits, hidden = [], []
    out = model.forward_batch(ForwardBatch.build(PROMPTS, [0, 0], PAGES, logits="all"), cache, return_all_hidden=True)
    logits.append(out.logits)
    hidden.append(out.hidden_states)
    prefill_hidden = out.all_hidden_states
    for step in range(3):  # decode, both sequences
        toks = [[11 + step], [222 + step]]
        out = model.forward_batch(ForwardBatch.build(toks, [lens[0] + step, lens[1] + step], PAGES), cache)
        logits.append(out.logits)
        hidden.append(out.hidden_states)
    drafts = []
    if model.config.num_mtp_layers:
        # MTP prefill: position p pairs with token p+1 and the target hidden state at p.
        nxt = [p[1:] + [11] for p in PROMPTS]
        prev = torch.cat([prefill_hidden[: lens[0]], prefill_hidden[lens[0] :]])
        m = model.mtp_forward(ForwardBatch.build(nxt, [0, 0], PAGES), prev, cache)
        logits.append(m.logits)
        hidden.append(m.hidden_states)
        drafts += _selection_tensors(m.draft_selection)
        chained = ForwardBatch.build([[5], [6]], [lens[0], lens[1]], PAGES)
        for reuse in (None, m.draft_selection.sequences_of([0, 1]) if m.draft_selection else None):
            r = model.mtp_forward(chained, m.hidden_states, cache, reuse_selection=reuse)
            logits.append(r.logits)
            hidden.append(r.hidden_states)
    return {
        "logits": logits,
        "hidden": hidden,
        "latent": [t.clone() for t in cache.latent],
        "indexer": {k: t.clone() for k, t in cache.indexer.items()},
        "drafts": drafts,
    }


def assert_same_replicated(a: dict, b: dict) -> None:
    """L1: the replicated state two ranks hold is bit-identical."""
    for x, y in zip(a["hidden"], b["hidden"]):
        assert torch.equal(x, y)
    for x, y in zip(a["latent"], b["latent"]):
        assert torch.equal(x, y)
    assert a["indexer"].keys() == b["indexer"].keys()
    for k in a["indexer"]:
        assert torch.equal(a["indexer"][k], b["indexer"][k])
    for x, y in zip(a["drafts"], b["drafts"]):
        assert torch.equal(x, y)
