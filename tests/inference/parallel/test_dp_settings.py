"""DP-attention settings are checked at the edge: before any rank starts or any weight is read, with
an error that names the setting, the value and what was expected."""

from __future__ import annotations

import json
import threading
import time

import pytest
from pydantic import ValidationError

from agent.cli.main import main
from inference.engine import Engine, EngineConfig
from inference.parallel.settings import ParallelConfig
from inference.parallel.state import ParallelConfigError

DP = {"tensor_parallel_size": 2, "attention_dp": True, "backend": "threads"}


def test_dp_attention_needs_two_ranks():
    with pytest.raises(ValidationError, match="attention_dp needs at least 2 ranks, got tensor_parallel_size=1"):
        ParallelConfig(attention_dp=True)


def test_dp_extras_default_to_split_and_need_dp_attention():
    assert ParallelConfig(tensor_parallel_size=2, attention_dp=True).split_extras
    with pytest.raises(ValidationError, match="dp_extras='replicated' applies only with attention_dp=True"):
        ParallelConfig(tensor_parallel_size=2, dp_extras="replicated")
    with pytest.raises(ValidationError, match="dp_extras"):
        ParallelConfig(tensor_parallel_size=2, attention_dp=True, dp_extras="tp")


@pytest.mark.parametrize("extras, message", [
    ("split", "intermediate_size = 128 is not divisible by the parallel size 3"),  # the dense MLP is split too
    ("replicated", "n_routed_experts = 8 is not divisible by the parallel size 3"),
])
def test_ranks_that_do_not_divide_the_model_fail_before_any_rank_starts(tp_checkpoint, extras, message):
    threads = threading.active_count()
    with pytest.raises(ParallelConfigError, match=message):
        Engine(tp_checkpoint, EngineConfig(kv_budget_tokens=64,
                                           parallel={**DP, "tensor_parallel_size": 3, "dp_extras": extras}))
    assert threading.active_count() == threads


def test_glm53_flash_checkpoints_are_refused_by_name(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "glm5_next"}))
    with pytest.raises(ValueError, match=r"DP attention \(--dp / --dp-attention\): not supported for GLM-5.3-Flash"):
        Engine(tmp_path, EngineConfig(kv_budget_tokens=64, parallel=DP))


def test_virtual_ranks_run_on_the_cpu_only(tp_checkpoint):
    with pytest.raises(ValueError, match="backend='threads' runs every rank on the CPU; got device='cuda'"):
        Engine(tp_checkpoint, EngineConfig(kv_budget_tokens=64, device="cuda", parallel=DP))


@pytest.mark.parametrize("flags, message", [
    (["--dp", "2", "--tp", "4"], "--dp 2 with --tp 4: attention split by heads inside each DP group is not supported"),
    (["--dp", "1"], "attention_dp needs at least 2 ranks"),
    (["--tp", "1", "--dp-attention"], "attention_dp needs at least 2 ranks"),
    (["--tp", "2", "--dp-extras", "replicated"], "dp_extras='replicated' applies only with attention_dp=True"),
])
def test_serve_refuses_rank_combinations_it_cannot_run(tp_checkpoint, capsys, flags, message):
    assert main(["serve", "--model", str(tp_checkpoint), "--kv-budget-tokens", "64", *flags]) == 2
    assert message in capsys.readouterr().err


def test_a_failing_virtual_rank_fails_the_engine_naming_it(tp_checkpoint):
    from inference.engine import EngineError, GenerateRequest, SamplingParams
    from inference.engine.runner_commands import CopyPages

    eng = Engine(tp_checkpoint, EngineConfig(dtype="float32", kv_budget_tokens=64, page_size=16, parallel=DP))
    try:
        eng.runner.send(CopyPages([0], [1]))  # a command without a rank: rank 1 refuses it and stops
        deadline = time.monotonic() + 60  # the rank reports itself at once; this only guards a hang
        while eng.fatal is None:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert "virtual rank 1 failed (TypeError: DP attention: CopyPages must come as a per-rank command)" in str(eng.fatal)
        with pytest.raises(EngineError, match="the engine has stopped: virtual rank 1 failed"):
            eng.submit(GenerateRequest(prompt_ids=[5, 6, 7], params=SamplingParams(max_tokens=2)))
    finally:
        eng.shutdown()
    assert eng.ranks.exit_codes() == [1]
