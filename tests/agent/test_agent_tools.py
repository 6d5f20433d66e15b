"""Built-in tools against a real Docker sandbox."""

from __future__ import annotations

import pytest

from agent.config import ToolLimits
from agent.tools import ToolSet, builtin_tools


def test_bash_keeps_shell_state_and_reports_exit_code(tools, workdir):
    first = tools.call("bash", {"command": f"cd {workdir} && export GREETING=hello"})
    assert not first.is_error and first.exit_code == 0
    second = tools.call("bash", {"command": "echo $GREETING from $(pwd); false"})
    assert f"hello from {workdir}" in second.output
    assert second.exit_code == 1 and "[exit code: 1]" in second.output


def test_bash_truncates_head_and_tail_and_saves_full_output(sandbox, workdir):
    limits = ToolLimits(max_output_chars=2000, max_output_lines=50, full_output_dir=f"{workdir}/outputs")
    tools = ToolSet(builtin_tools(sandbox, limits, workdir=workdir))
    result = tools.call("bash", {"command": "seq 1 5000"})
    assert result.truncated and not result.is_error
    lines = result.output.splitlines()
    assert lines[0] == "1" and "5000" in lines[-2]  # head and tail kept, exit code last
    assert len(result.output) < 2600
    marker = next(line for line in lines if "cut from the middle" in line)
    saved = marker.split(" is in ")[1].split(" ...]")[0]
    full = sandbox.read_file(saved).decode()
    assert full.splitlines() == [str(i) for i in range(1, 5001)]


def test_bash_timeout_kills_command_and_shell_survives(tools):
    result = tools.call("bash", {"command": "sleep 30", "timeout": 1})
    assert result.is_error and "timed out" in result.output
    after = tools.call("bash", {"command": "echo still-alive"})
    assert "still-alive" in after.output and after.exit_code == 0


def test_create_view_and_ranges(tools, workdir):
    created = tools.call("create", {"path": "pkg/mod.py", "file_text": "a = 1\nb = 2\nc = 3\n"})
    assert "created" in created.output and not created.is_error
    view = tools.call("view", {"path": "pkg/mod.py"})
    assert view.output.splitlines() == ["     1\ta = 1", "     2\tb = 2", "     3\tc = 3"]
    ranged = tools.call("view", {"path": f"{workdir}/pkg/mod.py", "view_range": [2, -1]})
    assert ranged.output.splitlines() == ["     2\tb = 2", "     3\tc = 3"]
    listing = tools.call("view", {"path": "."})
    assert "pkg/mod.py" in listing.output
    missing = tools.call("view", {"path": "nope.txt"})
    assert missing.is_error and "does not exist" in missing.output
    bad_range = tools.call("view", {"path": "pkg/mod.py", "view_range": [9, 12]})
    assert bad_range.is_error and "3 lines" in bad_range.output


def test_str_replace_requires_exactly_one_match_and_shows_diff(tools, sandbox, workdir):
    tools.call("create", {"path": "f.py", "file_text": "x = 1\ny = 1\nx = 1\n"})
    twice = tools.call("str_replace", {"path": "f.py", "old_str": "x = 1", "new_str": "x = 2"})
    assert twice.is_error and "2 times" in twice.output and "lines 1, 3" in twice.output
    none = tools.call("str_replace", {"path": "f.py", "old_str": "z = 1", "new_str": "z = 2"})
    assert none.is_error and "not found" in none.output
    once = tools.call("str_replace", {"path": "f.py", "old_str": "y = 1\nx = 1", "new_str": "y = 5\nx = 1"})
    assert not once.is_error
    assert "-y = 1" in once.output and "+y = 5" in once.output
    assert f"--- a{workdir}/f.py\n+++ b{workdir}/f.py\n" in once.output  # a/workspace/…, not a//workspace/…
    assert sandbox.read_file(f"{workdir}/f.py").decode() == "x = 1\ny = 5\nx = 1\n"


def test_insert_at_top_middle_and_end(tools, sandbox, workdir):
    tools.call("create", {"path": "g.txt", "file_text": "one\ntwo"})
    assert not tools.call("insert", {"path": "g.txt", "insert_line": 0, "text": "zero"}).is_error
    assert not tools.call("insert", {"path": "g.txt", "insert_line": 3, "text": "three"}).is_error
    assert not tools.call("insert", {"path": "g.txt", "insert_line": 2, "text": "one-and-a-half\n"}).is_error
    assert sandbox.read_file(f"{workdir}/g.txt").decode() == "zero\none\none-and-a-half\ntwo\nthree\n"
    past = tools.call("insert", {"path": "g.txt", "insert_line": 99, "text": "x"})
    assert past.is_error and "past the end" in past.output


def test_search_finds_lines_and_skips_git(tools):
    tools.call("create", {"path": "src/a.py", "file_text": "def handler():\n    return 42\n"})
    tools.call("create", {"path": "src/b.js", "file_text": "function handler() { return 1 }\n"})
    tools.call("create", {"path": ".git/config", "file_text": "handler = nope\n"})
    found = tools.call("search", {"pattern": r"handler\(\)"})
    assert sorted(found.output.splitlines()) == [
        "src/a.py:1: def handler():", "src/b.js:1: function handler() { return 1 }",
    ]
    only_py = tools.call("search", {"pattern": "handler", "include": "*.py"})
    assert only_py.output == "src/a.py:1: def handler():"
    assert "no matches" in tools.call("search", {"pattern": "absent_name"}).output
    bad = tools.call("search", {"pattern": "("})
    assert bad.is_error and "regular expression" in bad.output


def test_validation_errors_and_unknown_tools_go_back_as_results(tools):
    missing = tools.call("str_replace", {"path": "f.py"})
    assert missing.is_error and "old_str: required argument is missing" in missing.output
    wrong_type = tools.call("view", {"path": "f.py", "view_range": "first lines"})
    assert wrong_type.is_error and "view_range" in wrong_type.output
    not_json = tools.call("bash", "{not json")
    assert not_json.is_error and "not valid JSON" in not_json.output
    unknown = tools.call("teleport", {})
    assert unknown.is_error and "unknown tool 'teleport'" in unknown.output and "bash" in unknown.output


def test_finish_tool_ends_with_summary(tools):
    result = tools.call("finish", {"summary": "all done"})
    assert result.finish and result.summary == "all done"


def test_edits_keep_file_permissions(tools, sandbox, workdir):
    tools.call("create", {"path": "run.sh", "file_text": "#!/bin/sh\necho one\n"})
    tools.call("bash", {"command": "chmod 755 run.sh"})
    tools.call("str_replace", {"path": "run.sh", "old_str": "echo one", "new_str": "echo two"})
    tools.call("insert", {"path": "run.sh", "insert_line": 1, "text": "set -e"})
    tools.call("create", {"path": "run.sh", "file_text": "#!/bin/sh\nset -e\necho three\n"})
    result = tools.call("bash", {"command": "stat -c %a run.sh && ./run.sh"})
    assert result.output.splitlines()[:2] == ["755", "three"]


def test_str_replace_on_crlf_files_and_view_of_long_lines(tools, sandbox, workdir):
    sandbox.write_file(f"{workdir}/dos.txt", b"one\r\ntwo\r\nthree\r\n")
    result = tools.call("str_replace", {"path": "dos.txt", "old_str": "one\ntwo", "new_str": "one\n2"})
    assert not result.is_error, result.output
    assert sandbox.read_file(f"{workdir}/dos.txt") == b"one\r\n2\r\nthree\r\n"
    sandbox.write_file(f"{workdir}/wide.txt", ("x" * 1500 + "\n") * 100)
    view = tools.call("view", {"path": "wide.txt"})
    assert view.truncated and "wide.txt has 100 lines; showing 1-" in view.output
    assert len(view.output) < 4 * 10_000 + 500


@pytest.mark.timeout(120)  # without a working cancel the call would hang for 300 s
def test_cancel_stops_a_running_bash_and_keeps_the_shell(tools, sandbox, workdir):
    from agent_testkit import cancel_a_running_bash

    tools.call("bash", {"command": "export KEPT=yes"})
    stopped = cancel_a_running_bash(tools, sandbox, workdir)
    assert stopped.exit_code == 130 and "interrupted by the user" in stopped.output
    after = tools.call("bash", {"command": "echo $KEPT; pwd"})
    assert after.exit_code == 0 and after.output.splitlines()[:2] == ["yes", workdir]


def test_a_call_cancelled_before_it_starts_does_not_run(tools, sandbox, workdir):
    import threading

    cancel = threading.Event()
    cancel.set()
    result = tools.call("bash", {"command": "touch never-ran"}, cancel=cancel)
    assert result.is_error and "interrupted by the user" in result.output
    assert sandbox.exec_once(["test", "-e", f"{workdir}/never-ran"]).exit_code == 1
