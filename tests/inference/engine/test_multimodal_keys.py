"""Images in the prefix cache's keys, without a model: the key derivation itself, and the real
scheduler + radix cache hitting on the same screenshot and missing on a different one at the same
positions. PromptImage and the engine's image checks refuse what does not fit, naming the image."""

from __future__ import annotations

import pytest
import torch

from inference.engine.engine_config import EngineConfig
from inference.engine.host_tier import HostTier
from inference.engine.multimodal import PromptImage, cache_key_tokens, check_request_images, content_hash
from inference.engine.page_allocator import PageAllocator
from inference.engine.radix_cache import RadixCache
from inference.engine.request import EngineError, GenerateRequest
from inference.engine.sampling_params import SamplingParams
from inference.engine.scheduler import Scheduler
from inference.engine.sequence import Sequence

PS = 4
IMG = 90


def _image(seed: int, offset: int, n: int = 6) -> PromptImage:
    canvas = torch.randint(0, 256, (28, 28 * n // 1, 3), dtype=torch.uint8, generator=torch.Generator().manual_seed(seed))
    grid = torch.tensor([1, 2, 2 * n])
    return PromptImage(offset=offset, num_tokens=n, content_hash=content_hash(canvas, grid), canvas=canvas, grid_thw=grid)


def _prompt(before: int = 9, n: int = 6, after: int = 7) -> list[int]:
    return list(range(10, 10 + before)) + [IMG] * n + list(range(40, 40 + after))


def test_key_replaces_image_spans_by_content():
    ids = _prompt()
    a, a_again, b = _image(1, 9), _image(1, 9), _image(2, 9)
    key_a, key_b = cache_key_tokens(ids, [a]), cache_key_tokens(ids, [b])
    assert key_a == cache_key_tokens(ids, [a_again])  # same pixels, same key
    assert key_a[:9] == ids[:9] and key_a[15:] == ids[15:]  # text untouched
    assert key_a[9:15] == [a.key_value] * 6 and a.key_value < 0  # never a token id
    assert [i for i, (x, y) in enumerate(zip(key_a, key_b)) if x != y] == list(range(9, 15))
    assert cache_key_tokens(ids, []) is ids  # text-only prompts pay nothing


def _sched():
    config = EngineConfig(kv_budget_tokens=64 * PS, page_size=PS)
    alloc = PageAllocator(64)
    return Scheduler(config, RadixCache(PS, alloc, HostTier(0)), alloc)


def _serve_prompt(sched, ids, images, name):
    """Admit a request and run its whole prompt; -> the tokens it found cached."""
    seq = Sequence(name, ids, SamplingParams(max_tokens=1), images=images)
    sched.add(seq)
    cached = None
    while seq.num_computed < len(ids):
        batch = sched.schedule()
        for it in batch.items:
            cached = it.start if cached is None and it.seq is seq else cached
            it.seq.num_computed += len(it.token_ids)
    sched.finish(seq, "stop")
    return cached


def test_scheduler_hits_the_same_image_and_misses_another():
    sched = _sched()
    ids = _prompt(before=9, n=6, after=9)  # 24 tokens: the image covers positions 9..14
    assert _serve_prompt(sched, ids, [_image(1, 9)], "first") == 0
    assert _serve_prompt(sched, ids, [_image(1, 9)], "same screenshot") == 23  # all but the token that samples
    # A different image at the same positions matches up to the image's first token, no further.
    assert _serve_prompt(sched, ids, [_image(2, 9)], "other screenshot") == 9
    # Nor do the bare placeholder ids (a request that lost its image) match an image's tokens.
    assert _serve_prompt(sched, ids, [], "no image") == 9


def test_prompt_image_and_request_checks_name_the_problem():
    with pytest.raises(ValueError, match="expected uint8"):
        PromptImage(offset=0, num_tokens=1, content_hash="0" * 32, canvas=torch.zeros(4, 4, 3), grid_thw=torch.tensor([1, 2, 2]))
    with pytest.raises(ValueError, match="at least one image token"):
        _image(1, 0, n=6).__class__(offset=0, num_tokens=0, content_hash="0" * 32,
                                     canvas=torch.zeros(4, 4, 3, dtype=torch.uint8), grid_thw=torch.tensor([1, 2, 2]))

    class Vision:
        image_token_id = IMG

        @staticmethod
        def tokens_for(grid):
            return int(grid.prod()) // 4

    ids = _prompt()
    req = lambda images, prompt=ids: GenerateRequest(prompt_ids=prompt, images=images, params=SamplingParams())  # noqa: E731
    check_request_images(req([_image(1, 9)]), Vision)
    with pytest.raises(EngineError, match="no vision tower") as err:
        check_request_images(req([_image(1, 9)]), None)
    assert err.value.field == "images"
    with pytest.raises(EngineError, match=r"prompt_ids\[8:14\] are not all the image token") as err:
        check_request_images(req([_image(1, 8)]), Vision)
    assert err.value.field == "images[0]"
    with pytest.raises(EngineError, match="makes 6 image tokens, but num_tokens=5"):
        bad = _image(1, 9)
        check_request_images(req([PromptImage(offset=9, num_tokens=5, content_hash=bad.content_hash, canvas=bad.canvas,
                                              grid_thw=bad.grid_thw)]), Vision)
    with pytest.raises(EngineError, match="the prompt has 7 image tokens but the images cover 6"):
        check_request_images(req([_image(1, 9)], ids + [IMG]), Vision)
