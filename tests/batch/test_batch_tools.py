"""Batch jobs get the same tools as `horizon run`: the config's plugins in, its disabled_tools out."""

from __future__ import annotations

import json

import pytest

from agent.cli.main import main
from .helpers import call, make_repo, step, write_replay

pytestmark = [pytest.mark.docker]


def test_batch_jobs_use_the_configs_plugins_and_disabled_tools(tmp_path, docker_client):
    repo = make_repo(tmp_path / "repo", {"notes.txt": "one\ntwo\nthree\n"})
    model = write_replay(tmp_path / "replay.jsonl", [
        step(call("line_count", path="notes.txt")),
        step(call("search", pattern="two")),
        step(call("finish", summary="measured")),
    ])
    config = tmp_path / "horizon.toml"
    config.write_text('plugins = ["line_count"]\ndisabled_tools = ["search"]\n')
    jobs = tmp_path / "jobs.jsonl"
    jobs.write_text(json.dumps({"id": "measure", "repo": str(repo), "base_ref": "main", "task": "count lines"}) + "\n")
    out = tmp_path / "out"

    assert main(["batch", str(jobs), "--out", str(out), "--model", model, "--config", str(config)]) == 0

    events = [json.loads(l) for l in (out / "jobs" / "measure" / "trajectory.jsonl").read_text().splitlines()]
    outputs = [e["output"] for e in events if e["type"] == "tool_output"]
    assert outputs[0].startswith("3 lines, 3 words")  # the plugin ran in the job's checkout
    assert "unknown tool 'search'" in outputs[1]
