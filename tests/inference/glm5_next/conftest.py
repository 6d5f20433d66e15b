"""Fixtures for the GLM-5.3-Flash tests: transformers references saved by save_pretrained."""

from __future__ import annotations

import pytest

from .hf_flash_reference import make_hf_flash


@pytest.fixture
def hf_flash(tmp_path):
    """factory(seed=0, **text overrides) -> (transformers model, checkpoint dir it saved)."""
    counter = iter(range(1000))

    def make(seed: int = 0, **overrides):
        model = make_hf_flash(seed, **overrides)
        path = tmp_path / f"hf-flash-{next(counter)}"
        model.save_pretrained(path)
        return model, path

    return make


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread(one_torch_thread):
    """Every Flash test module runs its tiny models on one thread (tests/conftest.py)."""
    yield
