"""Ragged batches over state-pool slots: each sequence with its own number of new tokens and its
own position (prefill chunks and decode steps mixed in one forward) equals running it alone."""

from __future__ import annotations

import pytest
import torch

from inference.glm5_next.loader import load_flash_model
from inference.glm5_next.random_checkpoint import write_flash_checkpoint

TOL = 1e-4


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = write_flash_checkpoint(tmp_path_factory.mktemp("flash-pool"), "flash-tiny", seed=5, dtype=torch.float32)
    return load_flash_model(path)


def _prompts(model, lengths, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(3, model.config.vocab_size, (n,), generator=g).tolist() for n in lengths]


def test_ragged_chunked_prefill_equals_each_sequence_alone(model):
    prompts = _prompts(model, [5, 23, 14])
    refs = [model(torch.tensor([p]))[0] for p in prompts]
    pool = model.new_state_pool(slots=4, max_len=64)
    slots = [pool.alloc() for _ in prompts]
    outs: list[list[torch.Tensor]] = [[] for _ in prompts]
    offsets = [0, 0, 0]
    for cuts in ([3, 10, 1], [2, 7, 9], [0, 6, 4]):  # odd sizes; a sequence may sit a step out
        step = [(i, prompts[i][offsets[i] : offsets[i] + c]) for i, c in enumerate(cuts) if c]
        for (i, toks), logits in zip(step, model.forward_slots([(slots[i], toks) for i, toks in step], pool)):
            outs[i].append(logits)
            offsets[i] += len(toks)
    for out, ref in zip(outs, refs):
        assert (torch.cat(out) - ref).abs().max().item() <= TOL
    assert pool.lengths[slots].tolist() == [5, 23, 14]


def test_continuous_batching_mixes_prefill_and_decode_and_matches_greedy(model):
    prompts = _prompts(model, [9, 4, 17], seed=1)
    expected = [model.generate(torch.tensor([p]), max_new_tokens=6)[0].tolist() for p in prompts]
    pool = model.new_state_pool(slots=2, max_len=40)  # fewer slots than requests: one waits
    waiting = list(range(len(prompts)))
    running: dict[int, tuple[int, list[int]]] = {}  # request -> (slot, tokens to feed next)
    produced: dict[int, list[int]] = {i: [] for i in range(len(prompts))}
    while waiting or running:
        while waiting and pool.free_slots:
            i = waiting.pop(0)
            running[i] = (pool.alloc(), prompts[i])
        order = list(running)
        logits = model.forward_slots([running[i] for i in order], pool)
        for i, out in zip(order, logits):
            token = int(out[-1].argmax())
            produced[i].append(token)
            slot = running[i][0]
            if len(produced[i]) == 6:
                del running[i]
                pool.free(slot)  # the slot is reused (zeroed) by the waiting request
            else:
                running[i] = (slot, [token])
    assert [produced[i] for i in range(len(prompts))] == expected
    assert pool.free_slots == 2


def test_slots_are_returned_and_refused_when_exhausted(model):
    pool = model.new_state_pool(slots=3, max_len=8)
    for _ in range(1000):  # no leak across many alloc / free cycles
        taken = [pool.alloc() for _ in range(3)]
        with pytest.raises(RuntimeError, match="exhausted"):
            pool.alloc()
        for s in taken:
            pool.free(s)
    assert pool.free_slots == 3
    with pytest.raises(ValueError, match="slot=1"):
        pool.free(1)
    slot = pool.alloc()
    with pytest.raises(ValueError, match="max_len=8"):
        model.forward_slots([(slot, [3] * 9)], pool)


def test_state_and_kv_sizes_are_reported(model):
    pool = model.new_state_pool(slots=1, max_len=4)
    cfg = model.config
    assert pool.state_bytes_per_sequence == cfg.kda_state_bytes_per_sequence
    n_dsa = sum(1 for t in cfg.layer_types if t == "indexed_attention")
    assert pool.kv_bytes_per_token == 4 * n_dsa * (cfg.kv_lora_rank + 2 * cfg.index_head_dim)
