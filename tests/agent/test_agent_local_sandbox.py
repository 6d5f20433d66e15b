"""The same tools and `horizon run` on a LocalSandbox (host temp dir, no Docker, no isolation)."""

from __future__ import annotations

import subprocess

import pytest

from agent.cli.main import main
from agent.config import ToolLimits
from agent.tools import ToolSet, builtin_tools
from agent_testkit import call, write_replay


@pytest.fixture
def local_tools():
    from sandbox import LocalSandbox, SandboxConfig

    with LocalSandbox.start(SandboxConfig()) as sb:
        limits = ToolLimits(max_output_chars=500, max_output_lines=20, full_output_dir="/workspace/.outputs")
        yield sb, ToolSet(builtin_tools(sb, limits, workdir="/workspace"))


def test_every_builtin_tool_works_on_a_local_sandbox(local_tools):
    sb, tools = local_tools
    assert "created" in tools.call("create", {"path": "pkg/mod.py", "file_text": "def helper():\n    return 1\n"}).output
    assert "pkg/mod.py" in tools.call("view", {"path": "."}).output
    assert tools.call("search", {"pattern": "def helper"}).output == "pkg/mod.py:1: def helper():"
    assert "def helper()  [L1-2]" in tools.call("outline", {"path": "pkg"}).output
    assert tools.call("find_symbol", {"name": "helper"}).output.startswith("pkg/mod.py:1-2: function def helper()")
    assert not tools.call("str_replace", {"path": "pkg/mod.py", "old_str": "return 1", "new_str": "return 2"}).is_error
    long = tools.call("bash", {"command": "seq 1 1000"})
    assert long.truncated and "/workspace/.outputs/" in long.output
    saved = long.output.split(" is in ")[1].split(" ...]")[0]
    assert sb.read_file(saved).decode().splitlines()[-1] == "1000"


def test_horizon_run_on_a_local_sandbox(tmp_path, capsys):
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    script = write_replay(tmp_path / "s.jsonl", [
        {"tool_calls": [call("str_replace", path="calc.py", old_str="a - b", new_str="a + b")]},
        {"tool_calls": [call("bash", command="python3 -c 'import calc; assert calc.add(2, 3) == 5; print(\"ok\")'")]},
        {"tool_calls": [call("finish", summary="fixed")]},
    ])
    patch = tmp_path / "p.patch"
    code = main(["run", "fix add", "--repo", str(repo), "--model", f"replay:{script}", "--local",
                 "--patch-out", str(patch), "--trajectory", str(tmp_path / "t.jsonl")])
    assert code == 0, capsys.readouterr().err
    assert "+    return a + b" in patch.read_text()
    assert (repo / "calc.py").read_text().endswith("a - b\n")  # the original is untouched
    subprocess.run(["git", "apply", str(patch)], cwd=repo, check=True)
    assert (repo / "calc.py").read_text().endswith("a + b\n")


@pytest.mark.timeout(120)  # without a working cancel the call would hang for 300 s
def test_cancel_stops_a_running_bash_on_a_local_sandbox(local_tools):
    from agent_testkit import cancel_a_running_bash

    sb, tools = local_tools
    stopped = cancel_a_running_bash(tools, sb, "/workspace")
    assert stopped.exit_code == 130 and "interrupted by the user" in stopped.output
    assert tools.call("bash", {"command": "echo alive"}).output.startswith("alive")
