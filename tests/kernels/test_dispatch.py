"""Backend choice, input validation messages and the page-table-to-slot helper."""

from __future__ import annotations

import pytest
import torch

from kernels import fused_moe, indexer_topk, resolve_backend, slots_from_block_table, sparse_mla_attention

CPU = torch.device("cpu")


def test_auto_uses_the_reference_off_gpu(monkeypatch):
    monkeypatch.delenv("HORIZON_KERNEL_BACKEND", raising=False)
    assert resolve_backend("auto", CPU) == "torch"
    assert resolve_backend("triton", CPU) == "triton"  # explicit: runs the interpreter on CPU
    monkeypatch.setenv("HORIZON_KERNEL_BACKEND", "torch")
    assert resolve_backend("auto", torch.device("cuda")) == "torch"


def test_unknown_backends_are_rejected(monkeypatch):
    with pytest.raises(ValueError, match="backend='cuda'"):
        resolve_backend("cuda", CPU)
    monkeypatch.setenv("HORIZON_KERNEL_BACKEND", "fast")
    with pytest.raises(ValueError, match="HORIZON_KERNEL_BACKEND='fast'"):
        resolve_backend("auto", CPU)


def test_shape_errors_name_the_argument():
    q, cache = torch.randn(2, 3, 24), torch.randn(4, 8, 24)
    with pytest.raises(ValueError, match=r"topk_slots: dim 0 \(T\) is 5, expected 2"):
        sparse_mla_attention(q, cache, torch.zeros(5, 4, dtype=torch.int32), 1.0, 16)
    with pytest.raises(ValueError, match=r"latent_cache: shape \[4, 8, 20\]"):
        sparse_mla_attention(q, torch.randn(4, 8, 20), torch.zeros(2, 4, dtype=torch.int32), 1.0, 16)
    with pytest.raises(ValueError, match="kv_lora_rank=24"):
        sparse_mla_attention(q, cache, torch.zeros(2, 4, dtype=torch.int32), 1.0, 24)
    with pytest.raises(ValueError, match="topk_slots: dtype torch.float32"):
        sparse_mla_attention(q, cache, torch.zeros(2, 4), 1.0, 16)


def test_indexer_and_moe_validate_inputs():
    q, w = torch.randn(2, 4, 16), torch.randn(2, 4)
    keys, key_slots = torch.randn(8, 16), torch.zeros(1, 8, dtype=torch.int32)
    seq, pos = torch.zeros(2, dtype=torch.int32), torch.zeros(2, dtype=torch.int32)
    with pytest.raises(ValueError, match="weights: dtype torch.bfloat16"):
        indexer_topk(q, w.bfloat16(), keys, key_slots, seq, pos, 4, 0.25)
    with pytest.raises(ValueError, match="index_keys: dtype torch.bfloat16, expected the dtype of q"):
        indexer_topk(q, w, keys.bfloat16(), key_slots, seq, pos, 4, 0.25)
    with pytest.raises(ValueError, match="topk=0"):
        indexer_topk(q, w, keys, key_slots, seq, pos, 0, 0.25)
    x, gate_up, down = torch.randn(3, 8), torch.randn(2, 6, 8), torch.randn(2, 8, 3)
    ids, rw = torch.zeros(3, 1, dtype=torch.long), torch.ones(3, 1)
    with pytest.raises(ValueError, match=r"down: shape \[2, 8, 4\]"):
        fused_moe(x, gate_up, torch.randn(2, 8, 4), ids, rw)
    with pytest.raises(ValueError, match=r"gate_up: dim 1 is 5"):
        fused_moe(x, torch.randn(2, 5, 8), down, ids, rw)
    assert fused_moe(x, gate_up, down, ids, rw).shape == (3, 8)


def test_slots_from_block_table():
    table = torch.tensor([[3, 0, -1], [1, -1, -1]])
    slots = slots_from_block_table(table, torch.tensor([6, 2]), page_size=4)
    assert slots.tolist() == [
        [12, 13, 14, 15, 0, 1, -1, -1, -1, -1, -1, -1],
        [4, 5, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1],
    ]
    assert slots_from_block_table(table, torch.tensor([6, 2]), 4, max_len=5).shape == (2, 5)
    with pytest.raises(ValueError, match="max_len=13"):
        slots_from_block_table(table, torch.tensor([6, 2]), 4, max_len=13)
