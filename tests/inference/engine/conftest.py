"""Engine test fixtures: one tiny checkpoint, and transformers' greedy outputs as the oracle."""

from __future__ import annotations

import functools

import pytest
import torch


@pytest.fixture(scope="session")
def engine_checkpoint(tmp_path_factory):
    """The tiny preset (16 indexer heads, so exact score ties that top-k could break either way
    are rare enough not to make greedy parity a test of tie-breaking)."""
    from inference.random_checkpoint import write_random_checkpoint

    return write_random_checkpoint(tmp_path_factory.mktemp("ckpt-engine"), preset="tiny", seed=0)


@pytest.fixture(scope="session")
def hf_greedy(engine_checkpoint):
    """(prompt tuple, n) -> transformers GlmMoeDsaForCausalLM greedy continuation (fp32, no EOS)."""
    from transformers import GlmMoeDsaForCausalLM

    model = GlmMoeDsaForCausalLM.from_pretrained(engine_checkpoint, dtype=torch.float32,
                                                 attn_implementation="eager").eval()

    @functools.lru_cache(maxsize=None)
    def run(prompt: tuple[int, ...], n: int) -> list[int]:
        with torch.inference_mode():
            out = model.generate(torch.tensor([prompt]), max_new_tokens=n, do_sample=False,
                                 eos_token_id=None, pad_token_id=0)
        return out[0, len(prompt):].tolist()

    return run


def make_prompt(seed: int, n: int, vocab: int = 400) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, vocab, (n,), generator=g).tolist()


@pytest.fixture(autouse=True, scope="module")
def single_torch_thread():
    """The tiny model's ops are far too small to split across threads; on a busy 2-core machine
    intra-op threads only spin against each other (measured 14x slower)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
