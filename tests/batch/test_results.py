from __future__ import annotations

import json

import pytest

from agent.batch.jobs import JobLineError
from agent.batch.results import JobResult, ResultsLog, classify
from agent.batch.summary import render, summarize


@pytest.mark.parametrize(
    ("patch", "test_exit", "error", "expected"),
    [
        ("diff --git a b\n", 0, None, ("fixed", None)),
        ("diff --git a b\n", None, None, ("fixed", None)),
        ("diff --git a b\n", 1, None, ("tests-failed", "test command exited with 1")),
        ("", 0, None, ("no-change", None)),
        ("diff --git a b\n", 0, "timed out after 5s", ("error", "timed out after 5s")),
    ],
)
def test_classify(patch, test_exit, error, expected):
    assert classify(patch, test_exit, error) == expected


def test_results_log_appends_and_survives_a_torn_line(tmp_path):
    path = tmp_path / "out" / "results.jsonl"
    log = ResultsLog(path)
    log.append(JobResult(id="a", status="fixed", prompt_tokens=100, cached_tokens=50))
    with path.open("a") as f:
        f.write('{"id": "b", "sta')  # what a kill in the middle of a write leaves
    log = ResultsLog(path)
    log.append(JobResult(id="c", status="error", reason="boom"))
    assert log.finished_ids() == {"a", "c"}
    lines = path.read_text().splitlines()
    assert json.loads(lines[-1])["id"] == "c"


def test_summary_counts_tokens_and_cache_rate():
    results = [
        JobResult(id="a", status="fixed", prompt_tokens=300, cached_tokens=200, completion_tokens=10, duration_s=2),
        JobResult(id="b", status="error", reason="timed out", prompt_tokens=100, duration_s=3),
        JobResult(id="c", status="no-change"),
    ]
    invalid = [JobLineError(line=4, field="task", message="missing")]
    s = summarize(results, invalid, wall_time_s=4.0)
    assert s.by_status == {"fixed": 1, "tests-failed": 0, "no-change": 1, "error": 1}
    assert s.cache_hit_rate == 0.5 and s.completion_tokens == 10 and s.job_time_s == 5
    assert s.errors == {"b": "timed out"}
    text = render(s)
    assert "3 jobs: 1 fixed, 0 tests-failed, 1 no-change, 1 error; 1 invalid lines" in text
    assert "50% cached" in text


def test_progress_lines_and_live_status_line():
    import io

    from agent.batch.progress import Progress

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    now = [100.0]
    plain, tty = io.StringIO(), Terminal()
    for stream in (plain, tty):
        with Progress(2, stream, clock=lambda: now[0]) as progress:
            progress.started("a")
            progress.started("b")
            now[0] += 7
            assert progress.status_line() == "⠿ 2 running: a 7s, b 7s · 0/2 done"
            progress.finished("a", "fixed", None, 7.0)
            progress.finished("b", "error", "timed out after 5s", 7.0)
    assert plain.getvalue().splitlines() == [
        "start a",
        "start b",
        "[1/2] a fixed (7.0s) | 1 fixed",
        "[2/2] b error: timed out after 5s (7.0s) | 1 error, 1 fixed",
    ]
    assert "\r\x1b[2K[1/2] a fixed" in tty.getvalue() and "⠿ 1 running: b" in tty.getvalue()
