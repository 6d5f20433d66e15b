"""Dependencies point one way: evals -> agent -> sandbox; agent/CLI -> inference -> kernels.

Scans every module's imports (including function-local ones) with the AST, so a lazy import
cannot sneak a backwards edge in.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ["agent", "inference", "kernels", "sandbox", "evals"]
FORBIDDEN = {
    "kernels": {"inference", "sandbox", "agent", "evals"},
    "inference": {"sandbox", "agent", "evals"},
    "sandbox": {"inference", "kernels", "agent", "evals"},
    "agent": {"evals"},
    "evals": set(),
}


def _imported_top_levels(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_dependency_direction():
    violations = []
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            bad = _imported_top_levels(path) & FORBIDDEN[pkg]
            if bad:
                violations.append(f"{path.relative_to(ROOT)} imports {sorted(bad)}")
    assert not violations, "backwards dependencies:\n" + "\n".join(violations)


def test_files_stay_small():
    too_long = []
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            n = sum(1 for _ in path.open(encoding="utf-8"))
            if n > 600:
                too_long.append(f"{path.relative_to(ROOT)}: {n} lines")
    assert not too_long, "files far over the ~400-line guideline:\n" + "\n".join(too_long)
