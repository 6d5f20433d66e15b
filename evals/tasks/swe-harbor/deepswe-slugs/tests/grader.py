"""prepare: put the model's patch and the test patch on the base commit; grade: JUnit -> reward.json.

Reward 1 iff at least one fail-to-pass test exists, all of them pass and no pass-to-pass test fails;
a test missing from the report or skipped counts as failed.
"""

import json
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

CONFIG = json.loads(Path("/verifier/config.json").read_text())
REWARD = Path("/logs/verifier/reward.json")


def sh(*args):
    return subprocess.run(args, cwd="/app", capture_output=True, text=True)


def reset(patch_text):
    for path in sorted(set(re.findall(r"^diff --git a/(\S+) b/\S+$", patch_text, re.M))):
        if sh("git", "checkout", CONFIG["base_commit"], "--", path).returncode != 0:
            Path("/app", path).unlink(missing_ok=True)


def prepare():
    patch = Path("/logs/artifacts/model.patch")
    text = patch.read_text() if patch.exists() else ""
    if text.strip():
        reset(text)
        applied = sh("git", "apply", "--verbose", str(patch))
        if applied.returncode != 0:
            REWARD.write_text(json.dumps({"reward": 0, "apply_failed": 1}))
            print(applied.stderr, file=sys.stderr)
            sys.exit(1)
    test_patch = Path("/verifier/test.patch").read_text()
    reset(test_patch)
    if sh("git", "apply", "/verifier/test.patch").returncode != 0:
        sys.exit(2)  # the task is broken: no reward.json, so the trap marks an infrastructure failure


def grade():
    passed = set()
    for case in ET.parse("/logs/verifier/junit.xml").getroot().iter("testcase"):
        if any(child.tag in ("failure", "error", "skipped") for child in case):
            continue
        module = case.get("classname", "").replace(".", "/")
        passed.add(f"{module}.py::{case.get('name')}")
    f2p, p2p = CONFIG["f2p_node_ids"], CONFIG["p2p_node_ids"]
    f2p_ok = sum(t in passed for t in f2p)
    p2p_ok = sum(t in passed for t in p2p)
    reward = int(bool(f2p) and f2p_ok == len(f2p) and p2p_ok == len(p2p))
    REWARD.write_text(json.dumps({
        "reward": reward, "f2p": f2p_ok / len(f2p) if f2p else 0.0, "p2p": p2p_ok / len(p2p) if p2p else 1.0,
        "partial": (f2p_ok + p2p_ok) / max(1, len(f2p) + len(p2p)), "apply_failed": 0,
    }))


if __name__ == "__main__":
    {"prepare": prepare, "grade": grade}[sys.argv[1]]()
