"""Fixtures for the model tests."""

from __future__ import annotations

import pytest

from .hf_reference import make_hf_model, save_hf


@pytest.fixture
def hf_checkpoint(tmp_path):
    """factory(seed=0, **config overrides) -> (transformers model, checkpoint dir)."""
    counter = iter(range(1000))

    def make(seed: int = 0, **overrides):
        model = make_hf_model(seed, **overrides)
        return model, save_hf(model, tmp_path / f"hf-{next(counter)}")

    return make
