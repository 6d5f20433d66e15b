"""benchmarks/gpu_check_summary.py on results shaped like a GPU run's (fields the CPU dry run never
writes: kernel timings, the prefill forms, full-size decode rows, a failed test, a failed engine
stage), so the table's GPU branches are checked before the first device minute."""

from __future__ import annotations

import json

from benchmarks.gpu_check_summary import main

JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" errors="0" failures="1"
skipped="0" tests="3"><testcase classname="tests.kernels.test_x" name="test_a"/><testcase classname="tests.kernels.test_x"
name="test_b"><failure message="boom"/></testcase><testcase classname="tests.kernels.test_y" name="test_c"/></testsuite>
</testsuites>"""


def _decode(copy: float) -> dict:
    row = dict(context=8192, batch=16, step_ms=4.0, tokens_per_s=4000.0, indexer_GBps=1000.0, sparse_mla_GBps=2900.0,
               fused_moe_GBps=1450.0)  # fmt: skip
    return dict(device="NVIDIA H200", copy_GBps=copy, width=6144, layers=2, rows=[row])


def test_gpu_shaped_results_render(tmp_path, capsys):
    (tmp_path / "kernel_tests.xml").write_text(JUNIT)
    kernel_row = dict(name="mla_prefill", shape="T=S=1024 H=16", err=3e-3, ok=True, torch_ms=0.5, triton_ms=0.4,
                      speedup=1.25, GBps=2400.0)  # fmt: skip
    forms = [dict(T=512, heads=64, expanded_ms=0.2, absorbed_ms=0.5, absorbed_over_expanded=2.5)]
    (tmp_path / "kernels.json").write_text(json.dumps(dict(device="NVIDIA H200", rows=[kernel_row], prefill_forms=forms)))
    (tmp_path / "gpu_decode.json").write_text(json.dumps(_decode(4800.0)))
    (tmp_path / "gpu_decode_full.json").write_text(json.dumps(_decode(4800.0)))
    (tmp_path / "engine.json").write_text(json.dumps(dict(device="NVIDIA H200", preset="glm53-2layer",
                                                          checkpoint_write_s=30.0, error="the server exited")))
    rc = main([str(tmp_path), "kernel_tests:1:60", "kernels:0:30", "gpu_decode:0:40", "engine:1:90",
               "gpu_decode_full:124:240"])  # fmt: skip
    out = capsys.readouterr().out
    assert rc == 1
    assert "kernel tests: 2 passed, 1 failed, 0 skipped" in out and "FAILED test_x::test_b" in out
    assert "triton 0.400 ms  x1.25  2400 GB/s 50%" in out  # % of gpu_decode's measured copy bandwidth
    assert "absorbed / expanded 2.50" in out
    assert "sparse_mla 60% fused_moe 30%" in out and "gpu_decode (full sizes)" in out
    assert "engine (NVIDIA H200, glm53-2layer" in out and "ERROR the server exited" in out
    assert "timeout" in out
    summary = json.loads((tmp_path / "gpu_check.json").read_text())
    assert summary["kernel_tests"]["failed"] == ["test_x::test_b"] and summary["engine"]["error"]


def test_a_finished_engine_run_renders(tmp_path, capsys):
    engine = dict(device="NVIDIA H200", preset="glm53-2layer", checkpoint_write_s=31.0, server_start_s=22.0,
                  warmup_s=9.5, requests=64, finished=64, wall_s=12.0, completion_tokens=4096, tokens_per_s=341.3,
                  prompt_tokens=[301, 2480], ttft_p50_s=1.2, ttft_p99_s=6.5, max_tokens=64, errors=[])  # fmt: skip
    (tmp_path / "engine.json").write_text(json.dumps(engine))
    assert main([str(tmp_path), "engine:0:80"]) == 0
    out = capsys.readouterr().out
    assert "64/64 requests finished (64 new tokens each, prompts 301-2480 tokens) in 12.0 s: 341.3 tok/s" in out
    assert "TTFT p50 1200 ms p99 6500 ms" in out
