"""The `search` tool: a regular expression over the workspace, answered as file:line: text.

It runs GNU grep (Perl-compatible regex, binary files skipped, .git and dependency folders
excluded) inside the sandbox, so nothing has to be copied out; results are capped.
"""

from __future__ import annotations

import re
import shlex

from pydantic import BaseModel, Field

from agent.tools.base import Tool, ToolResult

EXCLUDED_DIRS = (".git", "node_modules", "__pycache__", ".venv", "venv", ".mypy_cache", ".tox", "target")
MAX_LINE_CHARS = 300


class SearchArgs(BaseModel):
    pattern: str = Field(min_length=1, description="regular expression (Perl/Python syntax)")
    path: str = Field(".", description="file or folder to search (default: the workspace)")
    include: str | None = Field(None, description="only files whose name matches this glob, e.g. '*.py'")
    ignore_case: bool = False


class SearchTool(Tool):
    """Search files for a regular expression; answers `path:line: text` for each matching line
    (binary files and .git/node_modules/__pycache__ are skipped)."""

    name = "search"
    Args = SearchArgs
    read_only = True

    def run(self, args: SearchArgs) -> ToolResult:
        try:
            re.compile(args.pattern)
        except re.error as exc:
            return ToolResult(output=f"pattern is not a valid regular expression: {exc}", is_error=True)
        limit = self.ctx.limits.search_max_results
        flags = ["-rnIP", "--color=never"] + [f"--exclude-dir={d}" for d in EXCLUDED_DIRS]
        if args.include:
            flags.append(f"--include={args.include}")
        if args.ignore_case:
            flags.append("-i")
        argv = ["grep", *flags, "-e", args.pattern, "--", self.ctx.shell_path(args.path)]
        result = self.ctx.run_once(f"{shlex.join(argv)} | head -n {limit + 1}", timeout=120)
        lines = [ln for ln in result.output.splitlines() if ln]
        if result.exit_code not in (0, 1, 141) and not lines:  # 141: head closed the pipe early
            return ToolResult(output=f"search failed: {result.output.strip()[:2000]}", is_error=True)
        if not lines:
            return ToolResult(output=f"no matches for {args.pattern!r} in {args.path}")
        shown = [_format(ln) for ln in lines[:limit]]
        if len(lines) > limit:
            shown.append(f"[more than {limit} matches; narrow the pattern, path or include]")
            return ToolResult(output="\n".join(shown), truncated=True)
        return ToolResult(output="\n".join(shown))


def _format(line: str) -> str:
    path, _, rest = line.partition(":")
    number, _, text = rest.partition(":")
    path = path.removeprefix("./")
    if len(text) > MAX_LINE_CHARS:
        text = text[:MAX_LINE_CHARS] + " [...]"
    return f"{path}:{number}: {text.strip()}"
