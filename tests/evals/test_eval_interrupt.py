"""After Ctrl-C the runner starts no new containers: a failed trial is not retried (the exiting
process could not remove a container started then)."""

import threading

import pytest

from evals.adapters import load_tasks
from evals.config import EvalConfig
from evals.runner import RunOptions, _run_with_retries, make_agent, make_engines

pytestmark = [pytest.mark.docker]


@pytest.mark.parametrize("interrupted", [False, True])
def test_infra_errors_are_retried_only_while_not_interrupted(eval_docker, suite, tmp_path, interrupted):
    root = suite("tb1-hello-file")
    (root / "tb1-hello-file" / "Dockerfile").write_text("FROM horizon/base:bookworm\nRUN exit 3\n")
    config = EvalConfig(max_infra_retries=2)
    options = RunOptions(agent="oracle", out_dir=tmp_path / "out", progress=False)
    [task] = load_tasks(root, config.base_image)
    stopping = threading.Event()
    if interrupted:
        stopping.set()
    result = _run_with_retries(task, make_agent(options, config), make_engines(config)[0], tmp_path / "out", 0,
                               options, config.max_infra_retries, "qa-interrupt", stopping)
    assert (result.status, result.error_class) == ("error", "build_failed")
    assert result.retries == (0 if interrupted else 2)
