"""A prefill chunk the kernel path expands (inference/layers/expanded_prefill.py), through the Triton
kernels (interpreted on CPU) over an FP8 KV cache, against the same steps on the kernels' torch
references: the gathered FP8 rows, kv_b_proj's per-head view and the strided rope keys reach the
kernel as it expects."""

from __future__ import annotations

import torch

import inference.layers.expanded_prefill as ep
from inference.forward_batch import ForwardBatch
from inference.loader import load_model
from inference.random_checkpoint import write_random_checkpoint


def test_expanded_chunk_on_triton_matches_the_references(tmp_path, device, monkeypatch):
    path = write_random_checkpoint(tmp_path, "tiny", seed=5, overrides={"index_topk": 24})
    model = load_model(path, dtype=torch.float32, device=device)
    expanded = []
    real = ep.attend
    monkeypatch.setattr(ep, "attend", lambda plan, *a, **k: expanded.append(plan.tokens.numel()) or real(plan, *a, **k))
    tokens = torch.randint(0, 500, (21,), generator=torch.Generator().manual_seed(1)).tolist()
    logits = {}
    for backend in ("triton", "torch"):
        model.kernel_backend = backend
        cache = model.new_cache(8, 4, kv_cache_dtype="fp8")
        first = model.forward_batch(ForwardBatch.build([tokens[:20]], [0], [[5, 1, 7, 0, 3, 2]], "all", device), cache)
        step = model.forward_batch(ForwardBatch.build([tokens[20:]], [20], [[5, 1, 7, 0, 3, 2]], "all", device), cache)
        logits[backend] = torch.cat([first.logits, step.logits]).cpu()
    assert expanded == [20] * (2 * model.config.num_hidden_layers)
    torch.testing.assert_close(logits["triton"], logits["torch"], atol=1e-4, rtol=1e-4)
