"""run_eval closes the agent it made (the horizon agent holds loaded engines), but never the caller's."""

from pathlib import Path

import pytest

import evals.runner as runner
from evals.runner import RunOptions, run_eval

TASKS = Path(__file__).resolve().parents[2] / "evals" / "tasks"


def _options(tmp_path: Path) -> RunOptions:
    # A filter that matches nothing makes run_eval fail after the agent exists: the close must still happen.
    return RunOptions(agent="horizon", model="replay:/nonexistent.jsonl", out_dir=tmp_path / "out",
                      filters=["no-such-task*"], progress=False)


def test_run_eval_closes_the_agent_it_made(tmp_path, monkeypatch):
    made = []
    real_make_agent = runner.make_agent
    monkeypatch.setattr(runner, "make_agent", lambda options, config: made.append(real_make_agent(options, config)) or made[-1])
    with pytest.raises(ValueError, match="matched none"):
        run_eval(TASKS, _options(tmp_path))
    assert len(made) == 1 and made[0].engines._closed


def test_run_eval_leaves_the_callers_agent_open(tmp_path):
    agent = runner.make_agent(_options(tmp_path), runner.EvalConfig())
    with pytest.raises(ValueError, match="matched none"):
        run_eval(TASKS, _options(tmp_path), agent=agent)
    assert not agent.engines._closed
    agent.close()
    assert agent.engines._closed
