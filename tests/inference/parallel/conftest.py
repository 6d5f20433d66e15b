"""Checkpoints for the parallel tests: O(1) random weights (the writer's 1/sqrt(fan_in) init) and
16 indexer heads, so top-k selections are not near-ties that TP's different summation order
could flip."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def tp_checkpoint(tmp_path_factory):
    from inference.random_checkpoint import write_random_checkpoint

    return write_random_checkpoint(tmp_path_factory.mktemp("ckpt-tp"), preset="tiny", seed=3)


@pytest.fixture(scope="session")
def tp_checkpoint_fp8(tmp_path_factory):
    """FP8 with the release's 128x128 blocks: every tiny shard cuts a block, so the loader takes
    its dequantize-whole-then-slice path."""
    from inference.random_checkpoint import write_random_checkpoint

    return write_random_checkpoint(tmp_path_factory.mktemp("ckpt-tp-fp8"), preset="tiny", seed=4, fp8=True)


@pytest.fixture(scope="session")
def dp_checkpoint(tmp_path_factory):
    """For the DP-attention engine: GLM-5.2/5.3's index_share_for_mtp_iteration, so MTP drafts 2..k
    reuse each rank's own first-draft selection."""
    from inference.random_checkpoint import write_random_checkpoint

    return write_random_checkpoint(tmp_path_factory.mktemp("ckpt-dp"), preset="tiny", seed=3,
                                   overrides=dict(index_share_for_mtp_iteration=True))


@pytest.fixture(scope="session")
def fp8_small_blocks(tmp_path_factory):
    """FP8 with 8x8 blocks: the tiny preset's TP=2 and DP=2 shards fall on block boundaries, so
    each rank keeps its e4m3 slice and the matching scale blocks resident."""
    from inference.random_checkpoint import write_random_checkpoint

    return write_random_checkpoint(tmp_path_factory.mktemp("ckpt-fp8-8x8"), preset="tiny", seed=5, fp8=True,
                                   fp8_block=(8, 8))
