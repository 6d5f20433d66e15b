"""Images through the serving engine on a random GLM-5.3-Flash checkpoint: greedy outputs equal the
model's own (vision tower on the processor's pixel rows, then `image_embeds`), under concurrency,
with prefill chunks cutting the image at odd places and with preemption; the vision tower runs once
per request, not once per chunk; the prefix cache hits a re-sent screenshot in tokens when the
Flash radix cache is on (and nothing while it is off)."""

from __future__ import annotations

import base64
import io

import numpy as np
import pytest
import torch

from inference.engine import Engine, EngineConfig, GenerateRequest, SamplingParams
from inference.glm5_next.image_processor import ImageLimits, preprocess
from inference.glm5_next.loader import load_flash_model
from inference.glm5_next.random_checkpoint import write_flash_checkpoint

PIL = pytest.importorskip("PIL.Image")
PS = 8
LIMITS = ImageLimits(min_image_tokens=4, max_image_tokens=64)  # the random checkpoint's preprocessor_config


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return write_flash_checkpoint(tmp_path_factory.mktemp("flash-images"), "flash-tiny", seed=5, dtype=torch.float32)


def _png(seed: int, size=(70, 50)):
    image = PIL.fromarray(np.random.default_rng(seed).integers(0, 256, (size[1], size[0], 3), dtype=np.uint8))
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return image, "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def _engine(ckpt, **overrides) -> Engine:
    cfg = dict(dtype="float32", kv_budget_tokens=1024, page_size=PS, enable_prefix_cache=False)
    cfg.update(overrides)
    return Engine(ckpt, EngineConfig(**cfg))


def _request(eng, url: str, before: list[int], after: list[int], n: int = 6, rid=None) -> GenerateRequest:
    image = eng.vision.prepare(url, "content[0]")
    ids, placed = eng.vision.expand(before + [eng.vision.image_token_id] + after, [image])
    return GenerateRequest(prompt_ids=ids, images=placed, request_id=rid,
                           params=SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True))


def _reference(model, pil, ids: list[int], n: int) -> list[int]:
    """Greedy decoding by the model alone, the image embedded from transformers-equal pixel rows."""
    embeds = model.embed_images(*preprocess([pil], limits=LIMITS))
    state = model.new_state(1)
    logits = model(torch.tensor([ids]), state, image_embeds=embeds)
    out = []
    for _ in range(n):
        token = logits[:, -1:].argmax(-1)
        out.append(int(token))
        logits = model(token, state)
    return out


@pytest.fixture(scope="module")
def cases(ckpt):
    """Three image requests (two images, text before/after of different lengths) and the model's outputs."""
    model = load_flash_model(ckpt)
    eng = _engine(ckpt)
    out = []
    for seed, before, after in [(0, 9, 5), (1, 3, 14), (0, 17, 2)]:
        pil, url = _png(seed, size=(70 + 14 * seed, 50))
        req = _request(eng, url, list(range(20, 20 + before)), list(range(300, 300 + after)))
        out.append((url, before, after, _reference(model, pil, req.prompt_ids, 6)))
    return out


@pytest.mark.parametrize("chunk_size, max_batch_tokens", [(512, 2048), (5, 13), (3, 7)])
def test_image_requests_under_concurrency_equal_the_model_alone(ckpt, cases, chunk_size, max_batch_tokens):
    eng = _engine(ckpt, chunk_size=chunk_size, max_batch_tokens=max_batch_tokens)
    reqs = [_request(eng, url, list(range(20, 20 + b)), list(range(300, 300 + a))) for url, b, a, _ in cases]
    text_only = GenerateRequest(prompt_ids=list(range(50, 90)), params=SamplingParams(temperature=0.0, max_tokens=6))
    results = eng.generate([reqs[0], text_only, reqs[1], reqs[2]])
    assert [r.token_ids for r in (results[0], results[2], results[3])] == [want for *_, want in cases]
    # One vision pass per image request, however many chunks its prompt took.
    assert eng.runner.images.vision_passes == 3


def test_image_requests_survive_preemption(ckpt, cases):
    eng = _engine(ckpt, kv_budget_tokens=7 * PS, max_running=3, chunk_size=6)
    reqs = [_request(eng, url, list(range(20, 20 + b)), list(range(300, 300 + a))) for url, b, a, _ in cases]
    results = eng.generate(reqs)
    assert [r.token_ids for r in results] == [want for *_, want in cases]
    assert eng.stats()["preemptions"] > 0


def test_resent_screenshot_hits_the_cache_when_it_is_on(ckpt, cases):
    """An agent session's next turn re-sends the screenshot in its history: with the Flash radix
    cache on it is served from the cache in tokens, while the same history with a different image
    of the same size misses from the image's first token on; outputs equal a cache-off engine's.
    With the cache off (GLM-5.3-Flash until KDA state snapshots are in the radix cache) nothing hits."""
    url, before, after, want = cases[1]
    _, other_url = _png(7, size=(84, 50))  # as many image tokens as cases[1]'s image
    text, tail = list(range(20, 20 + before)), list(range(300, 300 + after))
    eng = _engine(ckpt, enable_prefix_cache=True, session_ttl_s=60)
    first = _request(eng, url, text, tail)
    reply = eng.generate([first])[0]
    assert reply.token_ids == want

    def next_turn(image_url):
        req = _request(eng, image_url, text, tail + want + list(range(400, 411)))
        return req.model_copy(update={"session_id": "s"})

    again = eng.generate([next_turn(url)])[0]
    other = eng.generate([next_turn(other_url)])[0]
    off = _engine(ckpt)
    assert [again.token_ids, other.token_ids] == [r.token_ids for r in off.generate([next_turn(url), next_turn(other_url)])]
    if eng.prefix_cache.enabled:
        assert again.usage.cached_tokens >= len(first.prompt_ids) - PS
        assert other.usage.cached_tokens <= before
    else:
        assert again.usage.cached_tokens == other.usage.cached_tokens == 0
