"""The engine-shaped call: ForwardBatch over paged DSA rows + KDA state slots, and prefix hits
that resume from a KDA state snapshot (on the device and after a round trip through host memory)."""

from __future__ import annotations

import pytest
import torch

from inference.forward_batch import ForwardBatch
from inference.glm5_next.loader import load_flash_model
from inference.glm5_next.paged_cache import FlashPagedCache
from inference.glm5_next.random_checkpoint import write_flash_checkpoint

TOL = 1e-4
PAGE = 4


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = write_flash_checkpoint(tmp_path_factory.mktemp("flash-paged"), "flash-tiny", seed=11, dtype=torch.float32)
    return load_flash_model(path)


def _tokens(model, n, seed):
    return torch.randint(3, model.config.vocab_size, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def test_ragged_batch_over_shuffled_pages_equals_each_sequence_alone(model):
    seqs = [_tokens(model, n, seed=n) for n in (6, 19, 13)]
    refs = [model(torch.tensor([s]))[0] for s in seqs]
    cache = model.new_paged_cache(num_pages=16, page_size=PAGE, slots=3)
    tables = [[9, 2, 14], [0, 7, 3, 11, 5], [12, 1, 8, 4]]  # pages need not be ordered
    done = [0, 0, 0]
    got = [[], [], []]
    for cuts in ([5, 9, 2], [1, 7, 11], [0, 3, 0]):  # chunked prefill at odd sizes, rows sit out
        rows = [i for i, c in enumerate(cuts) if c]
        batch = ForwardBatch.build([seqs[i][done[i] : done[i] + cuts[i]] for i in rows], [done[i] for i in rows],
                                   [tables[i] for i in rows], logits="all")
        out = model.forward_batch(batch, cache, slots=rows)
        start = 0
        for i in rows:
            got[i].append(out[start : start + cuts[i]])
            start += cuts[i]
            done[i] += cuts[i]
    for g, ref in zip(got, refs):
        assert (torch.cat(g) - ref).abs().max().item() <= TOL


@pytest.mark.parametrize("via_host", [False, True])
def test_prefix_hit_resumes_from_a_state_snapshot(model, via_host):
    """Turn 1 of a session ends at a page boundary: keep its pages and a snapshot of the KDA state
    there. Turn 2 (same prefix + new text) resumes in another slot: restored state, shared pages,
    only the new tokens computed; logits equal a full recompute."""
    prefix = _tokens(model, 3 * PAGE, seed=1)  # 12 tokens: 3 full pages
    turn2 = prefix + _tokens(model, 9, seed=2)
    cache = model.new_paged_cache(num_pages=12, page_size=PAGE, slots=2, snapshots=2)
    model.forward_batch(ForwardBatch.build([prefix], [0], [[5, 6, 7]]), cache, slots=[0])
    cache.save(0, 1)
    assert cache.snapshots.bytes_per_slot == cache.state_bytes_per_sequence == model.config.kda_state_bytes_per_sequence
    source = None
    if via_host:  # spilled to host memory, then loaded from there, as the host tier does
        source = FlashPagedCache(model.config, 0, PAGE, 0, "cpu", model.dtype, snapshots=3)
        cache.spill(1, source, 2)
        cache.snapshots.reset(1)
    cache.reset_slot(0)  # the slot goes to someone else
    cache.load(2 if via_host else 1, 1, length=12, source=source)
    batch = ForwardBatch.build([turn2[12:]], [12], [[5, 6, 7, 2, 9, 10]], logits="all")
    hit = model.forward_batch(batch, cache, slots=[1])
    full = model(torch.tensor([turn2]))[0, 12:]
    assert (hit - full).abs().max().item() <= TOL


def test_a_slot_must_match_the_batch_position(model):
    cache = model.new_paged_cache(num_pages=4, page_size=PAGE, slots=1)
    with pytest.raises(ValueError, match="slot 0: its KDA state is at 0 tokens but the batch continues at 4"):
        model.forward_batch(ForwardBatch.build([[5, 6]], [4], [[0, 1]]), cache, slots=[0])
    with pytest.raises(ValueError, match="slots: 2 given for 1 sequences"):
        model.forward_batch(ForwardBatch.build([[5, 6]], [0], [[0]]), cache, slots=[0, 0])
