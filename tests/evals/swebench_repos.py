"""Small local git histories shaped like two public repositories SWE-bench draws from, and
SWE-bench instances over them (built by tests; GitHub is not reachable here).

- `psf/requests` (swebench parses it with parse_log_pytest_options, runs `pytest -rA`): a package
  installed with `pip install .`, parametrized tests whose ids have spaces, an xfail test. The
  history: an initial commit, a later commit that adds a pytest.ini forcing colour
  (`addopts = --color=yes`), then the upstream fix on main. Instance -1 starts after the colour
  commit, instance -2 before it.
- `django/django` 4.0 (parse_log_django, `./tests/runtests.py --verbosity 2 ...` over dotted test
  labels): a runtests.py that runs unittest at verbosity 2, so ids read `test_x (mod.Class.test_x)`.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path


def git(repo: Path, *args: str, day: int = 1) -> str:
    date = f"2024-03-{day:02d}T12:00:00Z"
    env = dict(os.environ, GIT_AUTHOR_NAME="Upstream Dev", GIT_AUTHOR_EMAIL="dev@example.org",
               GIT_COMMITTER_NAME="Upstream Dev", GIT_COMMITTER_EMAIL="dev@example.org",
               GIT_AUTHOR_DATE=date, GIT_COMMITTER_DATE=date, GIT_CONFIG_GLOBAL="/dev/null")
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, env=env).stdout


def commit(repo: Path, files: dict[str, str], message: str, day: int, executable: tuple[str, ...] = ()) -> str:
    for name, text in files.items():
        path = repo / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        if name in executable:
            path.chmod(0o755)
    git(repo, "add", "-A", day=day)
    git(repo, "commit", "-q", "-m", message, day=day)
    return git(repo, "rev-parse", "HEAD").strip()


REQUESTS_PYPROJECT = """[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "requests"
version = "2.0.1"

[tool.setuptools]
packages = ["requests"]
"""
REQUESTS_BUGGY = '''"""HTTP for humans (a small stand-in)."""


def split_header(value):
    """Split a comma-separated header into its items."""
    return [part for part in value.split(",")]
'''
REQUESTS_FIXED = '''"""HTTP for humans (a small stand-in)."""


def split_header(value):
    """Split a comma-separated header into its items, without blanks or surrounding spaces."""
    return [part.strip() for part in value.split(",") if part.strip()]
'''
REQUESTS_TESTS = '''import pytest

from requests import split_header


@pytest.mark.parametrize("value,expected", [("a", ["a"]), ("a,b", ["a", "b"])], ids=["one item", "two items"])
def test_split(value, expected):
    assert split_header(value) == expected


@pytest.mark.xfail(reason="quoted commas are not understood yet", strict=True)
def test_quoted_comma():
    assert split_header('"a,b"') == ['"a,b"']
'''
REQUESTS_NEW_TESTS = '''

def test_strips_spaces():
    assert split_header("a, b") == ["a", "b"]


@pytest.mark.parametrize("value", ["a,,b", "a, ,b"], ids=["empty item", "blank item"])
def test_drops_blanks(value):
    assert split_header(value) == ["a", "b"]
'''

DJANGO_PYPROJECT = """[build-system]
requires = ["setuptools>=64"]
build-backend = "setuptools.build_meta"

[project]
name = "Django"
version = "4.0.dev0"

[tool.setuptools]
packages = ["django", "django.utils"]
"""
DJANGO_TEXT_BUGGY = '''def truncate_words(text, count):
    """The first `count` words of `text`, with an ellipsis when words were cut."""
    words = text.split(" ")
    return " ".join(words[:count]) + ("…" if len(words) > count else "")
'''
DJANGO_TEXT_FIXED = '''def truncate_words(text, count):
    """The first `count` words of `text`, with an ellipsis when words were cut."""
    words = text.split()
    return " ".join(words[:count]) + ("…" if len(words) > count else "")
'''
RUNTESTS = '''#!/usr/bin/env python
"""Django's test runner entry point, reduced: unittest at the requested verbosity."""
import argparse
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
parser = argparse.ArgumentParser()
parser.add_argument("labels", nargs="*")
parser.add_argument("--verbosity", type=int, default=1)
parser.add_argument("--settings")
parser.add_argument("--parallel")
args = parser.parse_args()
import django  # noqa: E402

print(f"Testing against Django installed in '{os.path.dirname(django.__file__)}'")
suite = unittest.defaultTestLoader.loadTestsFromNames(args.labels or ["utils_tests"])
result = unittest.TextTestRunner(verbosity=args.verbosity).run(suite)
sys.exit(not result.wasSuccessful())
'''
DJANGO_TESTS = '''import unittest

from django.utils.text import truncate_words


class TextTests(unittest.TestCase):
    def test_truncate_short(self):
        self.assertEqual(truncate_words("a b", 5), "a b")

    def test_truncate_long(self):
        self.assertEqual(truncate_words("a b c", 2), "a b…")
'''
DJANGO_NEW_TESTS = '''
    def test_truncate_collapses_spaces(self):
        self.assertEqual(truncate_words("a  b   c", 2), "a b…")
'''


def _split(repo: Path, base: str, fix: str, sources: list[str], tests: list[str]) -> tuple[str, str]:
    return git(repo, "diff", base, fix, "--", *sources), git(repo, "diff", base, fix, "--", *tests)


def build_requests(root: Path) -> list[dict]:
    repo = root / "requests-src"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    files = {"pyproject.toml": REQUESTS_PYPROJECT, "requests/__init__.py": REQUESTS_BUGGY,
             "tests/test_requests.py": REQUESTS_TESTS}
    before_colour = commit(repo, files, "Header splitting", 1)
    after_colour = commit(repo, {"pytest.ini": "[pytest]\naddopts = --color=yes\n"}, "Colour in CI logs", 3)
    fix = commit(repo, {"requests/__init__.py": REQUESTS_FIXED,
                        "tests/test_requests.py": REQUESTS_TESTS + REQUESTS_NEW_TESTS}, "Strip header items", 6)
    git(repo, "bundle", "create", "-q", str(root / "psf__requests.bundle"), "--all")
    # The ids as swebench's parser reads pytest's summary: a parametrized id is cut at its first space.
    f2p = ["tests/test_requests.py::test_strips_spaces", "tests/test_requests.py::test_drops_blanks[empty",
           "tests/test_requests.py::test_drops_blanks[blank"]
    p2p = ["tests/test_requests.py::test_split[one", "tests/test_requests.py::test_split[two",
           "tests/test_requests.py::test_quoted_comma"]
    out = []
    for number, base in ((1, after_colour), (2, before_colour)):
        patch, test_patch = _split(repo, base, fix, ["requests"], ["tests"])
        out.append({"instance_id": f"psf__requests-{number}", "repo": "psf/requests", "version": "2.0",
                    "base_commit": base, "environment_setup_commit": base, "patch": patch, "test_patch": test_patch,
                    "problem_statement": "split_header keeps spaces and empty items: 'a, b' gives ['a', ' b'].",
                    "hints_text": "", "created_at": "2024-03-05T00:00:00Z",
                    "FAIL_TO_PASS": json.dumps(f2p), "PASS_TO_PASS": json.dumps(p2p), "repo_bundle": "psf__requests.bundle"})
    return out


def build_django(root: Path) -> list[dict]:
    repo = root / "django-src"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    files = {"pyproject.toml": DJANGO_PYPROJECT, "django/__init__.py": "VERSION = (4, 0)\n",
             "django/utils/__init__.py": "", "django/utils/text.py": DJANGO_TEXT_BUGGY,
             "tests/runtests.py": RUNTESTS, "tests/requirements/py3.txt": "# nothing beyond the standard library\n",
             "tests/utils_tests/__init__.py": "", "tests/utils_tests/test_text.py": DJANGO_TESTS}
    base = commit(repo, files, "Add truncate_words", 2, executable=("tests/runtests.py",))
    fix = commit(repo, {"django/utils/text.py": DJANGO_TEXT_FIXED,
                        "tests/utils_tests/test_text.py": DJANGO_TESTS + DJANGO_NEW_TESTS}, "Fixed #1 -- runs of spaces", 7)
    git(repo, "bundle", "create", "-q", str(root / "django__django.bundle"), "--all")
    patch, test_patch = _split(repo, base, fix, ["django"], ["tests"])
    ids = lambda *names: [f"{n} (utils_tests.test_text.TextTests.{n})" for n in names]  # noqa: E731
    return [{"instance_id": "django__django-1", "repo": "django/django", "version": "4.0", "base_commit": base,
             "environment_setup_commit": base, "patch": patch, "test_patch": test_patch,
             "problem_statement": "truncate_words counts empty words when text has runs of spaces.",
             "hints_text": "", "created_at": "2024-03-07T00:00:00Z",
             "FAIL_TO_PASS": json.dumps(ids("test_truncate_collapses_spaces")),
             "PASS_TO_PASS": json.dumps(ids("test_truncate_short", "test_truncate_long")),
             "repo_bundle": "django__django.bundle"}]


def write_suite(root: Path) -> Path:
    """instances.jsonl with the three instances, their bundles next to it."""
    root.mkdir(parents=True, exist_ok=True)
    records = build_requests(root) + build_django(root)
    path = root / "instances.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path
