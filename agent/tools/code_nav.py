"""`outline` and `find_symbol`: code navigation built on tree-sitter (see code_index.py)."""

from __future__ import annotations

import shlex

from pydantic import BaseModel, Field

from agent.tools.base import Tool, ToolContext, ToolResult
from agent.tools.code_index import LANGUAGES, CodeIndex, Symbol
from agent.tools.search import EXCLUDED_DIRS

MAX_FILES = 300
_NAME_FILTER = " -o ".join(f"-name '*{ext}'" for ext in LANGUAGES)
_PRUNE = " -o ".join(f"-name {shlex.quote(d)}" for d in EXCLUDED_DIRS)
_PRINTF = r"-printf '%p\t%T@\t%s\n'"


def _stat_lines(ctx: ToolContext, script: str) -> list[tuple[str, str, str]]:
    """(absolute path, mtime, size) rows printed by `find -printf` (paths relative to the workspace)."""
    result = ctx.run_once(script, timeout=120)
    rows = []
    for line in result.output.splitlines():
        parts = line.split("\t")
        if len(parts) == 3:
            rows.append((ctx.resolve(parts[0]), parts[1], parts[2]))
    return rows


def source_files(ctx: ToolContext, path: str) -> list[tuple[str, str, str]]:
    """(path, mtime, size) of the supported source files at or under `path`."""
    script = (
        f"find {shlex.quote(ctx.shell_path(path))} \\( -type d \\( {_PRUNE} \\) -prune \\) -o "
        f"\\( -type f \\( {_NAME_FILTER} \\) {_PRINTF} \\) | sort | head -n {MAX_FILES + 1}"
    )
    return _stat_lines(ctx, script)


def files_mentioning(ctx: ToolContext, path: str, word: str) -> list[tuple[str, str, str]]:
    includes = " ".join(f"--include='*{ext}'" for ext in LANGUAGES)
    excludes = " ".join(f"--exclude-dir={d}" for d in EXCLUDED_DIRS)
    script = (
        f"grep -rlwFZ {includes} {excludes} -e {shlex.quote(word)} -- {shlex.quote(ctx.shell_path(path))} | sort -z | "
        f"head -z -n {MAX_FILES + 1} | find -files0-from - -maxdepth 0 {_PRINTF}"
    )
    return _stat_lines(ctx, script)


class _NavTool(Tool):
    read_only = True

    def __init__(self, ctx: ToolContext, index: CodeIndex | None = None):
        super().__init__(ctx)
        self.index = index or CodeIndex()

    def _symbols(self, row: tuple[str, str, str]) -> list[Symbol]:
        return self.index.symbols(*row, read=self.ctx.sandbox.read_file)

    def _relative(self, path: str) -> str:
        prefix = self.ctx.workdir.rstrip("/") + "/"
        return path.removeprefix(prefix)


class OutlineArgs(BaseModel):
    path: str = Field(".", description="source file or folder (default: the workspace)")


class OutlineTool(_NavTool):
    """List the definitions (classes, functions, methods, types...) of a source file or of every
    source file under a folder, with line numbers. Python, JavaScript/TypeScript, Go, Rust, C/C++
    and Java are understood. Use it to get the shape of code before reading it."""

    name = "outline"
    Args = OutlineArgs

    def run(self, args: OutlineArgs) -> ToolResult:
        path = self.ctx.resolve(args.path)
        files = source_files(self.ctx, path)
        if not files:
            return ToolResult(output=f"no supported source files at {path}", is_error=True)
        parts, budget, shown = [], self.ctx.limits.max_output_chars, 0
        for row in files[:MAX_FILES]:
            symbols = self._symbols(row)
            lines = [self._relative(row[0])] + [
                f"{'  ' * (s.depth + 1)}{s.signature}  [L{s.line}-{s.end_line}]" for s in symbols
            ]
            block = "\n".join(lines if symbols else lines + ["  (no definitions)"])
            if shown + len(block) > budget and parts:
                parts.append(f"[... outline cut; {len(files) - len(parts)} more files: outline a subfolder or file]")
                return ToolResult(output="\n".join(parts), truncated=True)
            parts.append(block)
            shown += len(block) + 1
        if len(files) > MAX_FILES:
            parts.append(f"[only the first {MAX_FILES} files; outline a subfolder]")
        return ToolResult(output="\n".join(parts), truncated=len(files) > MAX_FILES)


class FindSymbolArgs(BaseModel):
    name: str = Field(min_length=1, description="symbol name, e.g. `parse` or `Parser.parse`")
    path: str = Field(".", description="folder or file to look in (default: the workspace)")


class FindSymbolTool(_NavTool):
    """Find where a symbol (function, class, method, type...) is defined: file, lines and signature,
    with the source of the definition when there are few matches."""

    name = "find_symbol"
    Args = FindSymbolArgs
    SHOW_SOURCE_LINES = 40

    def run(self, args: FindSymbolArgs) -> ToolResult:
        path = self.ctx.resolve(args.path)
        leaf = args.name.split(".")[-1].split("::")[-1]
        hits: list[tuple[str, Symbol]] = []
        for row in files_mentioning(self.ctx, path, leaf)[:MAX_FILES]:
            for symbol in self._symbols(row):
                if args.name in (symbol.name, symbol.qualified_name):
                    hits.append((row[0], symbol))
        if not hits:
            return ToolResult(output=f"no definition of {args.name!r} under {path}")
        out = []
        for file, s in hits[:50]:
            where = f" (in {s.parent})" if s.parent else ""
            out.append(f"{self._relative(file)}:{s.line}-{s.end_line}: {s.kind} {s.signature}{where}")
            if len(hits) <= 3:
                out.append(self._source(file, s))
        if len(hits) > 50:
            out.append(f"[{len(hits) - 50} more definitions]")
        return ToolResult(output="\n".join(out))

    def _source(self, file: str, s: Symbol) -> str:
        lines = self.ctx.sandbox.read_file(file).decode("utf-8", "replace").splitlines()
        last = min(s.end_line, s.line + self.SHOW_SOURCE_LINES - 1)
        body = "\n".join(f"{n:6d}\t{lines[n - 1]}" for n in range(s.line, min(last, len(lines)) + 1))
        more = f"\n[... {s.end_line - last} more lines; view {self._relative(file)} for all]" if last < s.end_line else ""
        return body + more
