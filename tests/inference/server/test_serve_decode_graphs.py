"""`horizon serve --cuda-graphs` on a CPU: the real process builds its decode graph (torch.compile)
at start-up, says so in its banner, and answers with the same greedy text as the eager engine
(the scripted reply). `--compile-decode`, the flag's earlier name, means the same.

NOTE: pages of 16, one intra-op thread (inductor's CPU code is specialized on the thread count)
and the scripted checkpoint's latent_norm_eps 1e-6 make its graph the one the engine and model
tests compiled earlier in the run: the process still traces and compiles its step, and inductor's
on-disk caches spare it the code generation (as on a restarted server)."""

from __future__ import annotations

import argparse

from .conftest import SCRIPTED_REPLY, serve_and_complete


def test_horizon_serve_with_decode_graphs(scripted_checkpoint):
    banner, text = serve_and_complete(scripted_checkpoint, "--cuda-graphs", "--graph-max-batch", "4",
                                      "--page-size", "16", env={"OMP_NUM_THREADS": "1"})
    assert "; decode graphs (compile: compiled; batch <= 4" in banner, banner
    assert text == SCRIPTED_REPLY


def test_the_decode_graph_flags():
    from inference.cli_serve import register

    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    parse = lambda *a: parser.parse_args(["serve", "--model", "m", *a])  # noqa: E731
    assert parse().decode_graphs is None  # EngineConfig decides: on for CUDA, off on CPU
    assert parse("--cuda-graphs").decode_graphs is True and parse("--compile-decode").decode_graphs is True
    assert parse("--no-cuda-graphs").decode_graphs is False
    assert parse("--graph-max-batch", "8").graph_max_batch == 8
    assert parse().page_size is None and parse("--page-size", "16").page_size == 16
