"""The vision tower and image placeholders against transformers' Glm5NextForConditionalGeneration
(tiny random config, fp32): one image of 4 x 6 patches -> 6 image tokens inside a text prompt."""

from __future__ import annotations

import pytest
import torch

from inference.glm5_next.loader import load_flash_model

from .hf_flash_reference import IMAGE_TOKEN, VIDEO_END, VIDEO_START

TOL = 1e-4


def _image(seed: int, t: int = 1, h: int = 4, w: int = 6):
    grid = torch.tensor([[t, h, w]])
    pixels = torch.randn(t * h * w, 3 * 2 * 14 * 14, generator=torch.Generator().manual_seed(seed))
    return pixels, grid


def _prompt(n_image_tokens: int, before: int = 7, after: int = 30) -> torch.Tensor:
    g = torch.Generator().manual_seed(before)
    text = lambda n: torch.randint(2, 89, (n,), generator=g)  # noqa: E731
    return torch.cat([text(before), torch.full((n_image_tokens,), IMAGE_TOKEN), text(after)]).unsqueeze(0)


def test_image_prompt_logits_match_transformers(hf_flash):
    hf, path = hf_flash(seed=6)
    ours = load_flash_model(path)
    assert hasattr(ours.model, "visual") and not ours.load_notes.get("vision tensors skipped (vision=False)")
    pixels, grid = _image(0)
    ids = _prompt(6)  # 4 x 6 patches merged 2 x 2 -> 6 tokens; 43 tokens: above index_topk
    with torch.no_grad():
        ref = hf(input_ids=ids, pixel_values=pixels, image_grid_thw=grid).logits
        hf_embeds = hf.model.get_image_features(pixels, grid).pooler_output[0]
    embeds = ours.embed_images(pixels, grid)
    assert (embeds - hf_embeds).abs().max().item() <= TOL
    assert (ours(ids, image_embeds=embeds) - ref).abs().max().item() <= TOL
    # the image really matters: text-only logits differ
    assert (ours(ids) - ref).abs().max().item() > 1e-2


def test_image_in_a_chunked_prefill_and_greedy_decode(hf_flash):
    hf, path = hf_flash(seed=7)
    ours = load_flash_model(path)
    pixels, grid = _image(1)
    ids = _prompt(6, before=3, after=4)
    with torch.no_grad():
        ref = hf.generate(input_ids=ids, pixel_values=pixels, image_grid_thw=grid, max_new_tokens=6,
                          do_sample=False, eos_token_id=None, pad_token_id=0)[:, ids.shape[1]:]
    embeds = ours.embed_images(pixels, grid)
    state = ours.new_state(1)
    ours(ids[:, :5], state, image_embeds=embeds[:2])  # the chunk boundary cuts the image
    logits = ours(ids[:, 5:], state, image_embeds=embeds[2:])
    out = []
    for _ in range(6):
        token = logits[:, -1:].argmax(-1)
        out.append(int(token))
        logits = ours(token, state)
    assert out == ref[0].tolist()


def test_placeholder_count_and_video_spans(hf_flash):
    _, path = hf_flash(seed=8)
    ours = load_flash_model(path)
    embeds = ours.embed_images(*_image(2))
    with pytest.raises(ValueError, match="6 rows for 5 image tokens"):
        ours(_prompt(5), image_embeds=embeds)
    ids = torch.tensor([[5, VIDEO_START, IMAGE_TOKEN, VIDEO_END, IMAGE_TOKEN]])
    assert ours.image_positions(ids).tolist() == [[False, False, False, False, True]]
    with pytest.raises(ValueError, match="grid_thw"):
        ours.embed_images(torch.zeros(10, 3 * 2 * 14 * 14), torch.tensor([[1, 4, 6]]))


def test_text_only_load_skips_the_tower(hf_flash):
    _, path = hf_flash(seed=9)
    ours = load_flash_model(path, vision=False)
    assert not hasattr(ours.model, "visual") and ours.load_notes["vision tensors skipped (vision=False)"] > 0
