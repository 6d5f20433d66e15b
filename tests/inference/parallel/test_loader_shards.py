"""Sharded loading: each rank reads only its slices, holds about 1/N of the sharded bytes, and
its shards concatenate to the one-process load."""

from __future__ import annotations

import pytest
import torch

from inference.loader import load_model
from inference.parallel import ParallelState, ThreadComm

from .thread_ranks import load_ranks


def _state(world: int, rank: int, ep: int, attention_dp: bool = False) -> ParallelState:
    return ParallelState(world, rank, ep, ThreadComm.group(world)[rank], attention_dp=attention_dp)


def test_shards_concatenate_to_the_whole(tp_checkpoint):
    whole = load_model(tp_checkpoint, dtype=torch.float32)
    ranks = load_ranks(tp_checkpoint, 2, 2, dtype=torch.float32)
    w = whole.model.layers[1]
    q_b = torch.cat([r.model.layers[1].self_attn.q_b_proj.weight for r in ranks])
    assert torch.equal(q_b, w.self_attn.q_b_proj.weight)
    o = torch.cat([r.model.layers[1].self_attn.o_proj.weight for r in ranks], dim=1)
    assert torch.equal(o, w.self_attn.o_proj.weight)
    experts = torch.cat([r.model.layers[1].mlp.experts.gate_up_proj for r in ranks])
    assert torch.equal(experts, w.mlp.experts.gate_up_proj)  # whole experts, same packing
    assert [r.model.layers[1].mlp.experts.e0 for r in ranks] == [0, whole.config.n_routed_experts // 2]
    # The replicated indexer is the same tensor everywhere.
    for r in ranks:
        assert torch.equal(r.model.layers[1].self_attn.indexer.wq_b.weight, w.self_attn.indexer.wq_b.weight)


def test_expert_tp_split_keeps_gate_then_up(tp_checkpoint):
    whole = load_model(tp_checkpoint, dtype=torch.float32).model.layers[1].mlp.experts.gate_up_proj
    parts = [r.model.layers[1].mlp.experts.gate_up_proj for r in load_ranks(tp_checkpoint, 2, 1, dtype=torch.float32)]
    inter = whole.shape[1] // 2
    gate = torch.cat([p[:, : inter // 2] for p in parts], dim=1)
    up = torch.cat([p[:, inter // 2 :] for p in parts], dim=1)
    assert torch.equal(gate, whole[:, :inter]) and torch.equal(up, whole[:, inter:])


@pytest.mark.parametrize("attention_dp", [False, True])
def test_split_tensors_are_never_read_whole(tp_checkpoint, monkeypatch, attention_dp):
    """Only this rank's slice of a split tensor is read from the memory map (get_slice), never the
    whole tensor: every read of a split tensor returns its local shape (TP, and DP attention with
    its split extras)."""
    import inference.loader as loader
    from inference.parallel.shard import shard_for

    reads: list[tuple[str, tuple]] = []
    whole: list[str] = []
    original_read, original_get = loader._Shards.read, loader._Shards.get

    def read(self, name, shard):
        t = original_read(self, name, shard)
        reads.append((name, tuple(t.shape)))
        return t

    def get(self, name):
        whole.append(name)
        return original_get(self, name)

    monkeypatch.setattr(loader._Shards, "read", read)
    monkeypatch.setattr(loader._Shards, "get", get)
    model = load_model(tp_checkpoint, dtype=torch.float32, parallel=_state(2, 0, 2, attention_dp))
    shapes = loader._Shards(loader.checkpoint_files(tp_checkpoint))
    split = [(n, got) for n, got in reads if not shard_for(n, model.config, model.parallel).replicated]
    assert len(split) > 10 and whole == []
    for name, got in split:
        full = shapes.shape(name)
        local = shard_for(name, model.config, model.parallel).local_shape(full)
        # Whole experts (ep == tp) are this rank's own: read whole, but only the owned ones.
        assert got == local and (local != full or ".experts." in name), name
    from inference.parallel.shard import owns_expert

    experts = {int(n.split(".experts.")[1].split(".")[0]) for n, _ in reads if ".experts." in n}
    assert experts and all(owns_expert(e, model.config, model.parallel) for e in experts)


def test_resident_bytes_are_about_one_nth(tp_checkpoint):
    one = load_model(tp_checkpoint, dtype=torch.float32).load_stats
    ranks = [r.load_stats for r in load_ranks(tp_checkpoint, 2, 2, dtype=torch.float32)]
    assert sum(r.param_bytes for r in ranks) > one.param_bytes  # replicated parts count twice
    for r in ranks:
        # The replicated parts (indexer, q_a/kv_a, router, norms) keep a rank above exactly 1/2.
        assert 0.5 * one.param_bytes < r.param_bytes < 0.7 * one.param_bytes
        assert r.read_bytes < 0.7 * one.read_bytes
        assert "rank" in r.describe() and "peak host RSS" in r.describe()


def test_bad_tp_fails_before_loading(tp_checkpoint, monkeypatch):
    import inference.loader as loader

    monkeypatch.setattr(loader, "checkpoint_files", lambda p: pytest.fail("read the checkpoint"))
    with pytest.raises(ValueError, match="num_attention_heads = 4 is not divisible by the parallel size 3"):
        load_model(tp_checkpoint, parallel=_state(3, 0, 3))
