"""Read pytest's `-rA` short test summary, the way Terminal-Bench's PytestParser does.

Everything after the "short test summary info" banner is scanned for `STATUS node-id` lines.
PASSED, SKIPPED and XFAIL count as passed for TB1 (SWE-bench is graded by swebench's own parsers).
"""

from __future__ import annotations

import re
from enum import Enum

BANNER = re.compile(r"=+ short test summary info =+")
LINE = re.compile(r"^(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)\s+(\S+?)(?:\s+-\s.*)?$")


class Outcome(str, Enum):
    PASSED = "PASSED"
    FAILED = "FAILED"
    ERROR = "ERROR"
    SKIPPED = "SKIPPED"
    XFAIL = "XFAIL"
    XPASS = "XPASS"


TB1_PASSING = {Outcome.PASSED, Outcome.SKIPPED, Outcome.XFAIL}


class SummaryMissing(ValueError):
    """No short test summary in the output: the run did not get as far as reporting."""


def parse_short_summary(output: str) -> dict[str, Outcome]:
    parts = BANNER.split(output, maxsplit=1)
    if len(parts) < 2:
        raise SummaryMissing("pytest's short test summary info section is missing (was -rA passed?)")
    results: dict[str, Outcome] = {}
    for raw in parts[1].splitlines():
        match = LINE.match(raw.strip())
        if match and not match.group(2).startswith("["):  # "SKIPPED [1] file:3: reason" has no node id
            results[match.group(2)] = Outcome(match.group(1))
    return results


def tb1_resolved(results: dict[str, Outcome]) -> bool:
    return bool(results) and all(status in TB1_PASSING for status in results.values())
