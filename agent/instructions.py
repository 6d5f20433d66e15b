"""The system prompt, and project instructions read from AGENTS.md.

AGENTS.md files are read from the repository root down to the working folder (root first, as
Codex does) and capped at `MAX_INSTRUCTION_BYTES`, so a huge file cannot eat the context.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from agent.config import AgentConfig

if TYPE_CHECKING:
    from sandbox import Sandbox

INSTRUCTION_FILES = ("AGENTS.md",)
MAX_INSTRUCTION_BYTES = 32 * 1024

BASE_PROMPT = """\
You are Horizon, an autonomous coding agent working in a sandboxed Linux machine.
The repository is at {workdir}. Work on the task by calling tools; every call's result comes back
to you. Look around before you edit: view files, search, use outline/find_symbol to navigate code.
Edit with str_replace/insert/create (they answer with a diff), and run the tests or the program with
bash to check your work. Shell state (cwd, variables) persists between bash calls; long outputs are
cut in the middle and saved in full to a file you can view or grep.
When the task is done, call `finish` with a short summary of what you changed. Do not ask the user
questions; nobody will answer."""


def build_system_prompt(config: AgentConfig, project_instructions: str = "", workdir: str | None = None) -> str:
    parts = [BASE_PROMPT.format(workdir=workdir or config.sandbox.workdir)]
    if project_instructions.strip():
        parts.append(
            "Project instructions (from AGENTS.md in the repository; follow them):\n"
            + project_instructions.strip()
        )
    if config.system_prompt_extra.strip():
        parts.append(config.system_prompt_extra.strip())
    return "\n\n".join(parts)


def _join_capped(texts: list[tuple[str, str]]) -> str:
    out, used = [], 0
    for label, text in texts:
        data = text.encode("utf-8")
        room = MAX_INSTRUCTION_BYTES - used
        if room <= 0:
            break
        if len(data) > room:
            text = data[:room].decode("utf-8", errors="ignore") + "\n[... AGENTS.md cut at 32 KiB ...]"
        out.append(f"<!-- {label} -->\n{text.strip()}")
        used += len(data)
    return "\n\n".join(out)


def load_project_instructions(repo: str | Path, subdir: str = "") -> str:
    """AGENTS.md files on the host, from `repo` down to `repo/subdir`."""
    root = Path(repo)
    folders = [root]
    for part in Path(subdir).parts:
        folders.append(folders[-1] / part)
    found = []
    for folder in folders:
        for name in INSTRUCTION_FILES:
            path = folder / name
            if path.is_file():
                found.append((str(path.relative_to(root)), path.read_text(encoding="utf-8", errors="replace")))
    return _join_capped(found)


def load_project_instructions_from_sandbox(sandbox: Sandbox, workdir: str) -> str:
    """AGENTS.md at the top of the workspace inside a sandbox (for callers that have no host copy)."""
    found = []
    for name in INSTRUCTION_FILES:
        path = str(PurePosixPath(workdir) / name)
        try:
            data = sandbox.read_file(path)
        except Exception:  # absent file: the sandbox raises its own not-found error
            continue
        found.append((name, data.decode("utf-8", errors="replace")))
    return _join_capped(found)
