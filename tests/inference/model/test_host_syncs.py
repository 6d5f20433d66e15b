"""The eager uniform step (what decode graphs capture) issues no host sync, counted on the CPU.

`HostSyncCounter` (inference/host_syncs.py) records every op that would make the host wait for a
device: value reads (.item/.tolist/bool(t)), data-dependent output sizes (nonzero, unique,
bincount, boolean masks). On CUDA, `torch.cuda.set_sync_debug_mode("error")` checks the same step
through the Triton kernels.
"""

from __future__ import annotations

import pytest
import torch

from inference.forward_batch import ForwardBatch
from inference.host_syncs import HostSyncCounter
from inference.layers.indexer import TopkSelection
from inference.loader import load_model
from inference.static_step import StepInputs
from kernels.grouped_blocks import group_into_blocks

PAGE = 4


def test_the_counter_sees_every_kind_of_host_sync():
    x = torch.arange(10.0)
    with HostSyncCounter() as syncs:
        x.sum().item()
        x.tolist()
        bool(x[0] > 1)
        x[x > 3]
        torch.nonzero(x)
        torch.unique(x)
        torch.bincount(torch.tensor([1, 2]))
        torch.repeat_interleave(x, torch.ones(10, dtype=torch.long))
    assert syncs.events == ["item", "tolist", "bool", "index (boolean mask)", "nonzero", "_unique2", "bincount",
                            "repeat_interleave"]  # fmt: skip
    with HostSyncCounter() as none:  # device-side equivalents
        x[torch.tensor([1, 2])]
        x.masked_fill(x > 3, 0)
        torch.repeat_interleave(x, torch.ones(10, dtype=torch.long), output_size=10)
        x.repeat_interleave(2)
        x.topk(3)
    assert none.events == []


@pytest.fixture(scope="module")
def model(tiny_checkpoint):
    return load_model(tiny_checkpoint, dtype=torch.float32)


def _filled_cache(model, kv_cache_dtype: str):
    """Three sequences of 5, 13 and 2 tokens, prefilled; -> (cache, their pages, their lengths)."""
    cache = model.new_cache(num_pages=24, page_size=PAGE, kv_cache_dtype=kv_cache_dtype)
    lens, pages = [5, 13, 2], [[3, 1, 2], [6, 7, 8, 9, 10], [12, 13]]
    prompts = [list(range(3, 3 + n)) for n in lens]
    model.forward_batch(ForwardBatch.build(prompts, [0, 0, 0], pages), cache)
    return cache, pages, lens


def _step(pages, lens, t: int = 1, width: int = 6) -> StepInputs:
    table = torch.full((len(pages), width), -1, dtype=torch.long)
    for i, p in enumerate(pages):
        table[i, : len(p)] = torch.tensor(p)
    positions = torch.tensor([n + j for n in lens for j in range(t)])
    return StepInputs(torch.arange(7, 7 + len(lens) * t), positions, torch.tensor(lens) + t, table, t)


@pytest.mark.parametrize("kv_cache_dtype", ["auto", "fp8"])
def test_eager_uniform_steps_issue_no_host_sync(model, kv_cache_dtype):
    cache, pages, lens = _filled_cache(model, kv_cache_dtype)
    with HostSyncCounter() as syncs:
        logits, hidden = model.step_forward(_step(pages, lens), cache)  # decode
        model.step_forward(_step(pages, lens, t=3), cache)  # MTP verification: 1 + 2 drafts
        prev = hidden.repeat_interleave(2, dim=0)
        step = _step(pages, lens, t=2)
        step.prev_hidden = prev
        _, _, selection = model.mtp_step_forward(step, cache)  # MTP catch-up pass
        chain = _step(pages, [n + 2 for n in lens])
        chain.prev_hidden, chain.reuse = hidden, selection
        model.mtp_step_forward(chain, cache)  # a draft reusing the first draft's selection
    assert syncs.events == []
    assert logits.shape == (3, model.config.vocab_size) and isinstance(selection, TopkSelection)


def test_the_general_forward_does_sync_so_the_count_is_not_vacuous(model):
    cache, pages, lens = _filled_cache(model, "auto")
    with HostSyncCounter() as syncs:
        model.forward_batch(ForwardBatch.build([[7], [8], [9]], lens, pages), cache)
    assert syncs.counts()["int"] >= 2  # max query length and max context read on the host


def test_fused_moe_grouping_on_the_gpu_path_issues_no_host_sync():
    ids = torch.tensor([[0, 3], [3, -1], [2, 0], [5, 1]])  # -1 and 5: another rank's experts
    with HostSyncCounter() as syncs:
        blocks = group_into_blocks(ids, 4, 2)
    assert syncs.events == []
    # Experts 0, 1, 2, 3 in blocks of 2: [0 (t0), 5 (t2)], [7 (t3), pad], [4 (t2), pad], [1 (t0), 2 (t1)].
    assert blocks.sorted_items[:8].tolist() == [0, 5, 7, 8, 4, 8, 1, 2]
    assert blocks.block_group[:4].tolist() == [0, 1, 2, 3]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (the Triton kernels)")
def test_the_kernel_path_step_issues_no_host_sync_on_cuda(tiny_checkpoint):
    gpu = load_model(tiny_checkpoint, dtype=torch.bfloat16, device="cuda")
    cache = gpu.new_cache(num_pages=24, page_size=PAGE, kv_cache_dtype="fp8")
    lens, pages = [5, 13, 2], [[3, 1, 2], [6, 7, 8, 9, 10], [12, 13]]
    gpu.forward_batch(ForwardBatch.build([list(range(3, 3 + n)) for n in lens], [0, 0, 0], pages, device="cuda"), cache)
    step = _step(pages, lens)
    step = StepInputs(*(t.cuda() for t in (step.input_ids, step.positions, step.seq_lens, step.block_table)), 1)
    gpu.step_forward(step, cache)  # compiles the kernels
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        gpu.step_forward(step, cache)
    finally:
        torch.cuda.set_sync_debug_mode("default")
