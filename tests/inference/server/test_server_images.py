"""Images through `horizon serve` on a random GLM-5.3-Flash checkpoint, end to end.

A chat request with one image part gives token for token what transformers' generate gives on its
processor's output (same checkpoint, its chat template, its preprocessor_config.json); the Anthropic
and Responses image blocks give what the chat route gives; bad images (bytes that do not decode,
over the configured size, a remote URL) are 400s naming the part while a valid request in flight
finishes as it would alone; a text-only checkpoint refuses image parts by name in every API."""

from __future__ import annotations

import base64
import io
import threading

import httpx
import numpy as np
import pytest
import torch

PIL = pytest.importorskip("PIL.Image")
MODEL = "flash-tiny"
MAX_IMAGE_BYTES = 30_000
STEPS = 8


def _png(seed: int, size=(70, 50), noise: bool = True) -> tuple[object, str, str]:
    """-> (PIL image, base64 PNG, data: URL)."""
    rng = np.random.default_rng(seed)
    if noise:
        pixels = rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
    else:  # smooth: compresses to a few hundred bytes
        pixels = np.broadcast_to(np.linspace(0, 255, size[0], dtype=np.uint8)[None, :, None], (size[1], size[0], 3))
    image = PIL.fromarray(np.ascontiguousarray(pixels))
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    data = base64.b64encode(buf.getvalue()).decode()
    return image, data, "data:image/png;base64," + data


# Tiny models: one intra-op thread for the whole module (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def flash_ckpt(tmp_path_factory):
    from inference.glm5_next.random_checkpoint import write_flash_checkpoint

    return write_flash_checkpoint(tmp_path_factory.mktemp("flash-serve"), "flash-tiny", seed=11, dtype=torch.float32)


@pytest.fixture(scope="module")
def flash_server(flash_ckpt):
    from inference.engine_defaults import default_engine_config
    from inference.server.runner import BackgroundServer, build_state

    # horizon serve's own defaults (a KV budget from the Flash config), as `horizon serve --model` builds them
    config = default_engine_config(flash_ckpt, dtype="float32", page_size=16, max_running=8,
                                   max_image_bytes=MAX_IMAGE_BYTES)
    assert config.kv_budget_tokens == 65536  # flash-tiny's whole context
    state = build_state(flash_ckpt, config, served_model_name=MODEL)
    assert state.defaults.variant == "glm-5.3-flash"  # chosen from the checkpoint's chat_template.jinja
    with BackgroundServer(state) as server:
        yield server


def _hf_greedy(ckpt, messages, steps: int) -> tuple[list[int], int]:
    """transformers' processor (the checkpoint's tokenizer, chat template, preprocessor_config.json)
    and Glm5NextForConditionalGeneration.generate -> (new token ids, prompt length)."""
    from transformers import Glm5NextForConditionalGeneration, PreTrainedTokenizerFast
    from transformers.models.glm5_next.image_processing_pil_glm5_next import Glm5NextImageProcessorPil
    from transformers.models.glm5_next.processing_glm5_next import Glm5NextProcessor

    class Processor(Glm5NextProcessor):
        # The video processor needs torchvision (not installed); images never touch it.
        def check_argument_for_proper_class(self, name, arg):
            return type(arg)

    tokenizer = PreTrainedTokenizerFast.from_pretrained(ckpt)
    processor = Processor(image_processor=Glm5NextImageProcessorPil.from_pretrained(ckpt), tokenizer=tokenizer,
                          video_processor=None, chat_template=(ckpt / "chat_template.jinja").read_text())
    inputs = processor.apply_chat_template(messages, tokenize=True, return_dict=True, add_generation_prompt=True,
                                           return_tensors="pt", clear_thinking=False)
    model = Glm5NextForConditionalGeneration.from_pretrained(ckpt, dtype=torch.float32, attn_implementation="eager")
    with torch.no_grad():
        out = model.eval().generate(**inputs, max_new_tokens=steps, do_sample=False, eos_token_id=None, pad_token_id=0)
    n = inputs["input_ids"].shape[1]
    return out[0, n:].tolist(), n


def _chat_body(url: str, **extra) -> dict:
    content = [{"type": "text", "text": "What is in "}, {"type": "image_url", "image_url": {"url": url}},
               {"type": "text", "text": " this picture?"}]
    return {"model": MODEL, "messages": [{"role": "user", "content": content}], "temperature": 0,
            "max_tokens": STEPS, "ignore_eos": True, "logprobs": True, **extra}


@pytest.fixture(scope="module")
def expected(flash_ckpt):
    from inference.tokenizer import Tokenizer

    pil, _, url = _png(0)
    msgs = [{"role": "user", "content": [{"type": "text", "text": "What is in "}, {"type": "image", "image": pil},
                                         {"type": "text", "text": " this picture?"}]}]
    ids, prompt_len = _hf_greedy(flash_ckpt, msgs, STEPS)
    tok = Tokenizer.from_pretrained(flash_ckpt)
    return url, [tok.decode([t]) for t in ids], prompt_len


def _tokens(body: dict) -> list[str]:
    return [entry["token"] for entry in body["choices"][0]["logprobs"]["content"]]


def test_one_image_equals_transformers_generate(flash_server, expected):
    url, want, prompt_len = expected
    body = httpx.post(f"{flash_server.base_url}/chat/completions", json=_chat_body(url), timeout=120).json()
    assert _tokens(body) == want
    assert body["usage"]["prompt_tokens"] == prompt_len  # the image expanded to the processor's token count
    assert flash_server.state.engine.runner.images.vision_passes >= 1
    listed = httpx.get(f"{flash_server.base_url}/models", timeout=30).json()["data"][0]
    assert listed["input_modalities"] == ["text", "image"]  # what the agent's openai backend asks


def test_bad_images_are_400s_naming_the_part_and_others_finish(flash_server, expected):
    url, want, _ = expected
    base = flash_server.base_url
    results: dict = {}

    def good(key: str) -> None:
        results[key] = httpx.post(f"{base}/chat/completions", json=_chat_body(url), timeout=120).json()

    threads = [threading.Thread(target=good, args=(f"good{i}",)) for i in range(2)]
    for t in threads:
        t.start()
    junk = "data:image/png;base64," + base64.b64encode(b"\x89PNG\r\n\x1a\n not really").decode()
    big = _png(1, size=(120, 120))[2]
    assert len(big) * 3 // 4 > MAX_IMAGE_BYTES
    cases = [(junk, "the image bytes do not decode"), (big, f"{MAX_IMAGE_BYTES}-byte limit"),
             ("https://example.com/cat.png", "remote image URLs are not fetched"),
             ("data:text/plain;base64,aGk=", "expected data:image/")]
    for bad, why in cases:
        r = httpx.post(f"{base}/chat/completions", json=_chat_body(bad), timeout=60)
        assert r.status_code == 400, r.text
        error = r.json()["error"]
        assert error["param"] == "messages[0].content[1]" and why in error["message"], error
    # A second message's bad image is named by its own index.
    two = _chat_body(url)
    two["messages"] += [{"role": "assistant", "content": "ok"},
                        {"role": "user", "content": [{"type": "text", "text": "and"}, {"type": "image_url", "image_url": {"url": junk}}]}]
    assert httpx.post(f"{base}/chat/completions", json=two, timeout=60).json()["error"]["param"] == "messages[2].content[1]"
    anthropic = {"model": MODEL, "max_tokens": 4, "messages": [{"role": "user", "content": [
        {"type": "text", "text": "see"}, {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}}]}]}
    r = httpx.post(f"{base}/messages", json=anthropic, timeout=60)
    assert r.status_code == 400 and r.json()["type"] == "error"
    assert "messages.0.content.1: remote image URLs are not fetched" in r.json()["error"]["message"]
    r = httpx.post(f"{base}/responses", json={"model": MODEL, "input": [{"role": "user", "content": [
        {"type": "input_image", "file_id": "file-1"}]}]}, timeout=60)
    assert r.status_code == 400 and "input.0.content.0: input_image needs image_url" in r.json()["error"]["message"]
    for t in threads:
        t.join()
    assert [_tokens(results[f"good{i}"]) for i in range(2)] == [want, want]


def test_anthropic_and_responses_images_match_the_chat_route(flash_server, expected):
    url, _, prompt_len = expected
    data = url.split(",", 1)[1]
    base = flash_server.base_url
    # Anthropic: thinking off unless asked -> the chat route with enable_thinking false.
    chat = httpx.post(f"{base}/chat/completions", json=_chat_body(
        url, logprobs=False, chat_template_kwargs={"enable_thinking": False}), timeout=120).json()
    msg = httpx.post(f"{base}/messages", json={"model": MODEL, "max_tokens": STEPS, "temperature": 0, "messages": [
        {"role": "user", "content": [{"type": "text", "text": "What is in "},
                                     {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}},
                                     {"type": "text", "text": " this picture?"}]}]}, timeout=120).json()
    # Anthropic bills cache reads apart: with the Flash prefix cache on, the chat request's prompt is cached.
    assert msg["usage"]["input_tokens"] + msg["usage"]["cache_read_input_tokens"] == chat["usage"]["prompt_tokens"]
    assert "".join(b.get("text", "") for b in msg["content"]) == (chat["choices"][0]["message"]["content"] or "")
    # Responses: input_image parts, thinking as in chat's default.
    chat = httpx.post(f"{base}/chat/completions", json=_chat_body(url, logprobs=False), timeout=120).json()
    resp = httpx.post(f"{base}/responses", json={"model": MODEL, "max_output_tokens": STEPS, "temperature": 0, "input": [
        {"role": "user", "content": [{"type": "input_text", "text": "What is in "},
                                     {"type": "input_image", "image_url": url},
                                     {"type": "input_text", "text": " this picture?"}]}]}, timeout=120).json()
    assert resp["usage"]["input_tokens"] == chat["usage"]["prompt_tokens"] == prompt_len
    reasoning = "".join(p["text"] for item in resp["output"] if item["type"] == "reasoning"
                        for p in item.get("content") or item.get("summary") or [])
    assert reasoning == (chat["choices"][0]["message"].get("reasoning_content") or "")


def test_session_resending_the_screenshot_hits_when_the_cache_is_on(flash_server, expected):
    url, _, _ = expected
    base = flash_server.base_url
    body = _chat_body(url, logprobs=False, session_id="shot-session", max_tokens=4)
    first = httpx.post(f"{base}/chat/completions", json=body, timeout=120).json()
    body["messages"] += [first["choices"][0]["message"], {"role": "user", "content": "and now?"}]
    second = httpx.post(f"{base}/chat/completions", json=body, timeout=120).json()
    cached = second["usage"]["prompt_tokens_details"]["cached_tokens"]
    if flash_server.state.engine.prefix_cache.enabled:
        assert cached >= first["usage"]["prompt_tokens"] - 16
    else:  # GLM-5.3-Flash's radix cache is off until KDA state snapshots are in it
        assert cached == 0


def test_text_only_checkpoint_refuses_images_by_name(live_server):
    base = live_server.base_url
    _, data, url = _png(2, noise=False)
    r = httpx.post(f"{base}/chat/completions", json={**_chat_body(url), "model": "glm-tiny"}, timeout=60)
    assert r.status_code == 400
    error = r.json()["error"]
    assert error["param"] == "messages[0].content[1]" and "reads text only" in error["message"]
    r = httpx.post(f"{base}/messages", json={"model": "glm-tiny", "max_tokens": 4, "messages": [
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}}]}]}]}, timeout=60)
    assert r.status_code == 400 and "messages.0.content.0.content.0: this model reads text only" in r.json()["error"]["message"]
    r = httpx.post(f"{base}/responses", json={"model": "glm-tiny", "input": [{"role": "user", "content": [
        {"type": "input_text", "text": "x"}, {"type": "input_image", "image_url": url}]}]}, timeout=60)
    assert r.status_code == 400 and "input.0.content.1: this model reads text only" in r.json()["error"]["message"]
    ok = httpx.post(f"{base}/chat/completions", json={"model": "glm-tiny", "max_tokens": 4, "messages": [
        {"role": "user", "content": [{"type": "text", "text": "hello"}]}]}, timeout=60)
    assert ok.status_code == 200
    assert httpx.get(f"{base}/models", timeout=30).json()["data"][0]["input_modalities"] == ["text"]


def test_serve_refuses_a_bad_image_limit_naming_it(flash_ckpt, capsys):
    from agent.cli.main import main

    assert main(["serve", "--model", str(flash_ckpt), "--max-image-bytes", "0"]) == 2
    assert "max_image_bytes" in capsys.readouterr().err
