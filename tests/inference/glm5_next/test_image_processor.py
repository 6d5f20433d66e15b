"""Image preprocessing equals transformers' Glm5NextImageProcessorPil; bad image parts are refused
with errors that name the part."""

from __future__ import annotations

import base64
import io

import numpy as np
import pytest
import torch

from inference.glm5_next.image_processor import ImageInputError, ImageLimits, image_token_count, load_image, preprocess

PIL = pytest.importorskip("PIL.Image")


def _image(w: int, h: int, seed: int):
    rng = np.random.default_rng(seed)
    return PIL.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8))


def _data_url(image, fmt="PNG") -> str:
    buf = io.BytesIO()
    image.save(buf, format=fmt)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


@pytest.mark.parametrize("size, max_tokens", [((97, 61), 8000), ((20, 12), 8000), ((640, 300), 64), ((56, 56), 8000)])
def test_matches_transformers_pil_processor(size, max_tokens):
    from transformers.models.glm5_next.image_processing_pil_glm5_next import Glm5NextImageProcessorPil

    image = _image(*size, seed=size[0])
    ref = Glm5NextImageProcessorPil()(images=[image], return_tensors="pt", max_image_tokens=max_tokens)
    pixels, grid = preprocess([image], limits=ImageLimits(max_image_tokens=max_tokens))
    assert grid.tolist() == ref["image_grid_thw"].tolist()
    assert torch.allclose(pixels, ref["pixel_values"].float(), atol=1e-5)
    n = image_token_count(grid)[0]
    assert 16 <= n <= max_tokens


def test_data_url_round_trip_and_bad_parts():
    image = _image(40, 30, seed=1)
    part = {"type": "image_url", "image_url": {"url": _data_url(image)}}
    assert np.array_equal(np.asarray(load_image(part, "messages[0].content[1]")), np.asarray(image))
    with pytest.raises(ImageInputError, match=r"messages\[0\].content\[2\]: remote image URLs are not fetched"):
        load_image({"image_url": {"url": "https://example.com/cat.png"}}, "messages[0].content[2]")
    bad = {"image_url": {"url": "data:image/png;base64," + base64.b64encode(b"not an image").decode()}}
    with pytest.raises(ImageInputError, match="content\\[3\\]: the image bytes do not decode"):
        load_image(bad, "content[3]")
    with pytest.raises(ImageInputError, match="does not decode"):
        load_image({"image_url": {"url": "data:image/png;base64,%%%"}}, "content[4]")
    with pytest.raises(ImageInputError, match="byte limit"):
        load_image(part, "content[5]", ImageLimits(max_bytes=100))
    with pytest.raises(ImageInputError, match="pixel limit"):
        load_image(part, "content[6]", ImageLimits(max_pixels=100))


def test_local_paths_only_where_allowed(tmp_path):
    path = tmp_path / "shot.png"
    _image(30, 20, seed=2).save(path)
    part = {"image_url": {"url": str(path)}}
    assert load_image(part, "content[0]", allow_paths=True).size == (30, 20)
    with pytest.raises(ImageInputError, match="unsupported image URL"):
        load_image(part, "content[0]")


def test_transparency_is_white_and_truncated_bytes_are_refused():
    """Screenshots are often RGBA: transparent pixels become white as in transformers' convert_to_rgb,
    not the colour their hidden RGB holds; a PNG cut short is an error naming the part."""
    from transformers.models.glm5_next.image_processing_pil_glm5_next import Glm5NextImageProcessorPil

    rgba = np.random.default_rng(3).integers(0, 256, (60, 90, 4), dtype=np.uint8)
    rgba[:30, :, 3] = 0  # the top half fully transparent
    image = PIL.fromarray(rgba, "RGBA")
    decoded = load_image(_data_url(image), "content[0]")
    assert decoded.mode == "RGB" and (np.asarray(decoded)[:30] == 255).all()
    ref = Glm5NextImageProcessorPil()(images=[image], return_tensors="pt")
    pixels, grid = preprocess([image])
    assert grid.tolist() == ref["image_grid_thw"].tolist()
    assert torch.allclose(pixels, ref["pixel_values"].float(), atol=1e-5)
    url = _data_url(_image(64, 64, seed=4))
    raw = base64.b64decode(url.split(",", 1)[1])
    cut = "data:image/png;base64," + base64.b64encode(raw[: len(raw) // 2]).decode()
    with pytest.raises(ImageInputError, match=r"content\[7\]: the image bytes do not decode"):
        load_image(cut, "content[7]")
