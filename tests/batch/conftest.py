"""Fixtures for the batch tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from .helpers import BUGGY_CALC, CALC_TEST, git, make_repo


@pytest.fixture
def git_cmd():
    return git


@pytest.fixture
def small_repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "calc", {"calc.py": "def add(a, b):\n    return a - b\n"})


@pytest.fixture
def calc_repo_factory(tmp_path: Path):
    def make(name: str) -> Path:
        return make_repo(tmp_path / "repos" / name, {"calc.py": BUGGY_CALC, "test_calc.py": CALC_TEST})

    return make
