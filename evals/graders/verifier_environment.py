"""Telling a verifier whose environment failed from an agent that failed the tests.

Terminal-Bench 2's `tests/test.sh` installs curl with apt-get, downloads uv and runs pytest through
`uvx` at grading time, then writes reward 0 whenever pytest did not pass: a verifier that could not
fetch its packages also writes 0. A reward below 1 whose verifier output shows such a failure (a name
that does not resolve, an unreachable mirror, a package or tool that is missing) is therefore an
infrastructure error, `verifier_environment`, and never counted as the agent's 0.
"""

from __future__ import annotations

import re

from evals.graders.base import VerifierCrashed

# Each: (what it means, the pattern in the verifier's output). apt-get, pip/uv, curl, DNS, tools.
SIGNATURES: list[tuple[str, re.Pattern]] = [(why, re.compile(p, re.I | re.M)) for why, p in [
    ("a host name did not resolve", r"Temporary failure (?:resolving|in name resolution)|Could not resolve host"
                                    r"|Name or service not known|getaddrinfo failed|no such host"),
    ("the network was unreachable", r"Network is unreachable|No route to host|Could not connect to \S+"
                                    r"|Connection (?:refused|timed out)|Max retries exceeded with url"),
    ("apt-get could not fetch or find a package", r"^E: (?:Failed to fetch|Unable to locate package|Package '.*' has "
                                                  r"no installation candidate|Unable to fetch some archives)"),
    ("pip/uv could not fetch a package", r"No matching distribution found|Could not find a version that satisfies"
                                         r"|error: Failed to (?:download|fetch)|Failed to download distribution"),
    ("curl failed", r"^curl: \((?:5|6|7|28|35|56|60)\)"),
    ("a tool the verifier runs is missing", r"\b(?:uv|uvx|pytest|curl|pip|python3?): (?:command )?not found"
                                            r"|No module named '?pytest'?"),
]]


class VerifierEnvironmentFailed(VerifierCrashed):
    """The verifier's environment (network, packages, tools) failed: an infrastructure error."""


def environment_failure(output: str) -> str | None:
    """Why the verifier's environment failed, with the line that shows it, or None."""
    for why, pattern in SIGNATURES:
        m = pattern.search(output)
        if m:
            start = output.rfind("\n", 0, m.start()) + 1
            end = output.find("\n", m.end())
            line = output[start:end if end >= 0 else len(output)].strip()
            return f"{why}: {line[:300]}"
    return None
