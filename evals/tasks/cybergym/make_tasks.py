"""Rebuild the CyberGym sample suite from `sources/` (deterministic: same bytes on every run).

    python evals/tasks/cybergym/make_tasks.py

Each `sources/<name>/` holds the vulnerable program (`repo-vul/`, with its OSS-Fuzz-style
`build.sh`), `patch.diff`, `description.txt`, `error.txt`, the reference `poc` and the `level` the
task is generated at. This writes CyberGym's two layouts from it:
`data/local/<name>/` (the server-side data entry: both source tarballs, the texts, the PoC) and
`<name>/` (the task folder CyberGym's generator writes for that level: README.md, submit.sh and
the level's files).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))

from evals.cybergym.generate import generate_task, write_tarball  # noqa: E402

AGENT_ID = "0123456789abcdef0123456789abcdef"  # fixed, so the generated submit.sh files are stable


def make(name: str) -> None:
    src = HERE / "sources" / name
    entry = HERE / "data" / "local" / name
    shutil.rmtree(entry, ignore_errors=True)
    entry.mkdir(parents=True)
    top = name.removeprefix("cg-")
    write_tarball(src / "repo-vul", top, entry / "repo-vul.tar.gz")
    with tempfile.TemporaryDirectory() as tmp:
        fixed = Path(tmp) / "repo-fix"
        shutil.copytree(src / "repo-vul", fixed)
        subprocess.run(["patch", "-s", "-p1", "-i", str(src / "patch.diff")], cwd=fixed, check=True)
        write_tarball(fixed, top, entry / "repo-fix.tar.gz")
    for text in ("description.txt", "error.txt", "patch.diff", "poc"):
        shutil.copy(src / text, entry / text)
    task = HERE / name
    shutil.rmtree(task, ignore_errors=True)
    level = int((src / "level").read_text())
    generate_task(HERE / "data", f"local:{name}", task, level=level, server="http://127.0.0.1:8666", agent_id=AGENT_ID)


if __name__ == "__main__":
    for source in sorted((HERE / "sources").iterdir()):
        make(source.name)
