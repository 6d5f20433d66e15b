"""Pytest summary parsing, reward files, pass@k and the image substitution map."""

from __future__ import annotations

import pytest

from evals.graders.base import VerifierCrashed
from evals.graders.pytest_summary import SummaryMissing, Outcome, parse_short_summary, tb1_resolved
from evals.graders.reward_file import _parse_reward
from evals.graders.swe_patch import touched_files
from evals.images import ImageMap, rewrite_from_lines
from evals.results import TrialResult
from evals.summary import pass_at_k, summarize

OUTPUT = """============================= test session starts ==============================
collected 4 items

tests/test_outputs.py ..Fs                                                 [100%]
=========================== short test summary info ============================
PASSED tests/test_outputs.py::test_a
PASSED tests/test_outputs.py::test_b[1-x]
FAILED tests/test_outputs.py::test_c - AssertionError: assert 1 == 2
SKIPPED [1] tests/test_outputs.py:9: not today
XFAIL tests/test_outputs.py::test_d - reason: known
==================== 1 failed, 2 passed, 1 skipped in 0.03s ====================
"""


def test_short_summary_statuses():
    parsed = parse_short_summary(OUTPUT)
    assert parsed == {
        "tests/test_outputs.py::test_a": Outcome.PASSED,
        "tests/test_outputs.py::test_b[1-x]": Outcome.PASSED,
        "tests/test_outputs.py::test_c": Outcome.FAILED,
        "tests/test_outputs.py::test_d": Outcome.XFAIL,
    }
    assert not tb1_resolved(parsed)
    del parsed["tests/test_outputs.py::test_c"]
    assert tb1_resolved(parsed)
    assert not tb1_resolved({})


def test_missing_summary_is_a_parse_error():
    with pytest.raises(SummaryMissing):
        parse_short_summary("bash: pytest: command not found\n")


def test_reward_files():
    assert _parse_reward('{"reward": 1, "partial": 0.5}', "0")[0] == 1.0
    assert _parse_reward(None, " 0.0\n")[0] == 0.0
    assert _parse_reward('{"a": 1, "b": 0}', None)[0] == 0.0
    for bad_json, bad_txt in [(None, None), ('{"reward": "yes"}', None), ("[1]", None), (None, "nan"), (None, "one")]:
        with pytest.raises(VerifierCrashed):
            _parse_reward(bad_json, bad_txt)


def test_touched_files_from_a_git_diff():
    patch = "diff --git a/src/x.py b/src/x.py\n--- a/src/x.py\n+++ b/src/x.py\ndiff --git a/old.txt b/new.txt\n"
    assert touched_files(patch) == ["new.txt", "old.txt", "src/x.py"]


def test_pass_at_k_matches_the_closed_form():
    assert pass_at_k(4, 0, 2) == 0.0
    assert pass_at_k(4, 4, 2) == 1.0
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25)
    assert pass_at_k(4, 1, 2) == pytest.approx(1 - 3 / 6)  # 1 - C(3,2)/C(4,2)


def _r(task, attempt, status, error_class=None, tokens=(0, 0, 0)):
    return TrialResult(task_id=task, format="tb1", agent="a", attempt=attempt, status=status, error_class=error_class,
                       started_at=0.0, finished_at=2.0, tokens={"input": tokens[0], "output": tokens[1], "cached": tokens[2]})


def test_summary_separates_infra_errors_and_counts_tokens():
    results = [_r("t1", 0, "resolved", tokens=(100, 10, 80)), _r("t1", 1, "failed"),
               _r("t2", 0, "error", "build_failed"), _r("t2", 1, "failed", tokens=(100, 5, 20))]
    s = summarize(results, "a")
    assert s.trials == 4 and s.infra_errors == 1 and s.resolved_trials == 1
    assert s.resolved_rate == pytest.approx(1 / 3)
    assert s.pass_at_k["pass@1"] == pytest.approx((0.5 + 0.0) / 2)  # t2 has one graded trial
    assert s.pass_at_k["pass@2"] == pytest.approx(1.0)  # only t1 has two graded trials
    assert s.cache_hit_rate == pytest.approx(100 / 200)
    assert s.error_classes == {"build_failed": 1}


def test_image_map_rewrites_only_unavailable_mapped_bases():
    dockerfile = (
        "FROM python:3.13-slim-bookworm AS build\nRUN true\n"
        "FROM build\nFROM --platform=linux/amd64 ghcr.io/laude-institute/t-bench/ubuntu-24-04:latest\n"
        "FROM local/present:1\nFROM quay.io/unknown/image:2\n"
    )
    text, notes = rewrite_from_lines(dockerfile, ImageMap(), available=lambda image: image == "local/present:1")
    lines = text.splitlines()
    assert lines[0] == "FROM horizon/base:bookworm AS build"
    assert lines[2] == "FROM build"
    assert lines[3] == "FROM --platform=linux/amd64 horizon/base:bookworm"
    assert lines[4] == "FROM local/present:1" and lines[5] == "FROM quay.io/unknown/image:2"
    assert len(notes) == 2 and "python:3.13-slim-bookworm" in notes[0] and "substituted horizon/base:bookworm" in notes[0]


def test_image_map_overrides_and_disables_defaults():
    m = ImageMap.with_overrides({"quay.io/unknown/*": "my/base:1", "python:*": ""})
    assert m.target("quay.io/unknown/image:2") == "my/base:1"
    assert m.target("python:3.11-slim") is None
    assert m.target("ubuntu:24.04") == "horizon/base:bookworm"
