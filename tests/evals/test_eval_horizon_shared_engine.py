"""The horizon eval agent's `embedded:` trials share one engine; closing the agent stops it."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from evals.adapters import load_tasks
from evals.agents.base import AgentContext
from evals.agents.horizon import HorizonAgent
from sandbox import BASE_IMAGE, LocalSandbox

TASKS = Path(__file__).resolve().parents[2] / "evals" / "tasks" / "terminal-bench"
ENGINE = {"dtype": "float32", "kv_budget_tokens": 4096, "page_size": 16}


def test_two_embedded_trials_load_the_model_once(tmp_path, tiny_checkpoint):
    task = load_tasks(TASKS / "tb1-hello-file", BASE_IMAGE)[0]
    agent = HorizonAgent(f"embedded:{tiny_checkpoint}",
                         {"max_steps": 1, "embedded": {"max_new_tokens": 4, "engine": ENGINE}})
    outcomes = []
    for trial in range(2):
        with LocalSandbox.start() as sandbox:
            ctx = AgentContext(task=task, sandbox=sandbox, terminal=None, deadline=time.monotonic() + 120,
                               log_dir=tmp_path / f"trial-{trial}", workdir="/workspace")
            ctx.log_dir.mkdir()
            outcomes.append(agent.run(ctx))
    assert all(o.error is None and o.tokens.output >= 1 for o in outcomes), outcomes  # the model answered
    assert agent.engines.stats() == {"loads": 1, "engines": 1}
    (engine,) = agent.engines.engines()
    loop = engine._thread
    agent.close()
    assert not loop.is_alive() and agent.engines.stats()["engines"] == 0
    assert loop not in threading.enumerate()
