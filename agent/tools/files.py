"""File tools: `view`, `create`, `str_replace` and `insert`.

They read and write through the sandbox API (bytes in, bytes out), so they work the same in a
Docker sandbox and a LocalSandbox. Edits answer with a unified diff so the model sees what changed.
"""

from __future__ import annotations

import difflib
import posixpath
import shlex

from pydantic import BaseModel, Field

from agent.images import ImageFileError, image_part, image_type
from agent.tools.base import Tool, ToolContext, ToolResult

MAX_LINE_CHARS = 2000
LISTING_SCRIPT = (
    'p={p}; if [ -d "$p" ]; then echo DIR; cd "$p" && find . -maxdepth 2 -not -name . '
    "-not -path './.git/*' -not -path '*/node_modules/*' -not -path '*/__pycache__*' "
    "-not -name .git | sort | head -n {limit}; "
    'elif [ -e "$p" ]; then echo FILE; else echo MISSING; fi'
)


def _error(text: str) -> ToolResult:
    return ToolResult(output=text, is_error=True)


def read_text(ctx: ToolContext, path: str) -> str:
    return decode_text(ctx.sandbox.read_file(path), path)


def decode_text(data: bytes, path: str) -> str:
    if b"\0" in data[:8192]:
        raise ValueError(f"{path} is a binary file ({len(data)} bytes)")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path} is not UTF-8 text ({exc})") from None


def write_keeping_mode(ctx: ToolContext, path: str, text: str) -> None:
    """Rewrite an existing file without losing its permissions (an edited script stays executable)."""
    result = ctx.run_once(f"stat -c %a {shlex.quote(ctx.shell_path(path))}", timeout=30)
    mode = result.output.strip()
    ctx.sandbox.write_file(path, text, mode=int(mode, 8) if result.exit_code == 0 and mode.isdigit() else 0o644)


def numbered(lines: list[str], first: int) -> str:
    out = []
    for n, line in enumerate(lines, first):
        line = line.rstrip("\n")
        if len(line) > MAX_LINE_CHARS:
            line = line[:MAX_LINE_CHARS] + f" [... line cut at {MAX_LINE_CHARS} chars]"
        out.append(f"{n:6d}\t{line}")
    return "\n".join(out)


def file_kind(ctx: ToolContext, path: str, listing_limit: int = 0) -> tuple[str, str]:
    """("DIR", listing) | ("FILE", "") | ("MISSING", "")."""
    script = LISTING_SCRIPT.format(p=shlex.quote(ctx.shell_path(path)), limit=max(listing_limit, 1))
    result = ctx.run_once(script, timeout=60)
    kind, _, rest = result.output.partition("\n")
    return kind.strip(), rest


class ViewArgs(BaseModel):
    path: str = Field(description="file or directory (relative paths are relative to the workspace)")
    view_range: list[int] | None = Field(
        None, min_length=2, max_length=2, description="[first, last] line numbers to show; last -1 = end of file"
    )


class ViewTool(Tool):
    """Show a file with line numbers (optionally only `view_range`), or list a directory two levels
    deep. Large files show their first lines; ask for a range to see more. An image file (PNG, JPEG,
    GIF, WebP, BMP) is shown as the image itself when you can see images."""

    name = "view"
    Args = ViewArgs
    read_only = True

    def run(self, args: ViewArgs) -> ToolResult:
        path = self.ctx.resolve(args.path)
        kind, listing = file_kind(self.ctx, path, listing_limit=400)
        if kind == "MISSING":
            return _error(f"{path} does not exist")
        if kind == "DIR":
            entries = listing.strip().splitlines()
            more = "\n[... listing cut at 400 entries]" if len(entries) >= 400 else ""
            return ToolResult(output=f"{path}:\n" + "\n".join(e.removeprefix("./") for e in entries) + more)
        data = self.ctx.sandbox.read_file(path)
        if image_type(data) is not None:
            return _view_image(data, path)
        try:
            text = decode_text(data, path)
        except ValueError as exc:
            return _error(str(exc))
        lines = text.splitlines(keepends=True)
        if not lines:
            return ToolResult(output=f"{path} is empty")
        first, last = 1, min(len(lines), self.ctx.limits.view_max_lines)
        if args.view_range:
            first, last = args.view_range
            last = len(lines) if last == -1 else min(last, len(lines))
            if not (1 <= first <= len(lines)) or last < first:
                return _error(f"view_range {args.view_range} is outside {path}, which has {len(lines)} lines")
        # Stop early when long lines would flood the context, whatever the line count.
        budget, shown = self.ctx.limits.max_output_chars * 4, last
        for n in range(first, last + 1):
            budget -= min(len(lines[n - 1]), MAX_LINE_CHARS) + 8
            if budget < 0:
                shown = max(first, n - 1)
                break
        out = numbered(lines[first - 1 : shown], first)
        if shown < len(lines) and (shown < last or not args.view_range):
            return ToolResult(output=out + f"\n[{path} has {len(lines)} lines; showing {first}-{shown}. "
                              "Pass view_range to see more.]", truncated=True)
        return ToolResult(output=out)


def _view_image(data: bytes, path: str) -> ToolResult:
    """An image file: its description, and the image itself for a model that can see it."""
    try:
        part, text = image_part(data, path)
    except ImageFileError as exc:
        return _error(str(exc))
    return ToolResult(output=f"{path}: {text}", images=[part])


class CreateArgs(BaseModel):
    path: str = Field(description="file to create or overwrite")
    file_text: str = Field(description="the complete content of the file")


class CreateTool(Tool):
    """Create a file with the given content (parent folders are created), or overwrite it."""

    name = "create"
    Args = CreateArgs

    def run(self, args: CreateArgs) -> ToolResult:
        path = self.ctx.resolve(args.path)
        kind, _ = file_kind(self.ctx, path)
        if kind == "DIR":
            return _error(f"{path} is a directory")
        if kind == "FILE":
            write_keeping_mode(self.ctx, path, args.file_text)
        else:
            self.ctx.run_once(f"mkdir -p {shlex.quote(self.ctx.shell_path(posixpath.dirname(path)))}", timeout=30)
            self.ctx.sandbox.write_file(path, args.file_text)
        n = len(args.file_text.splitlines())
        return ToolResult(output=f"{'overwrote' if kind == 'FILE' else 'created'} {path} ({n} lines)")


def diff_labels(path: str) -> tuple[str, str]:
    """git-style `a/…`, `b/…` names; an absolute path keeps one slash (`a/workspace/x.py`)."""
    bare = path.lstrip("/")
    return f"a/{bare}", f"b/{bare}"


def unified_diff(path: str, before: str, after: str) -> str:
    diff = difflib.unified_diff(before.splitlines(keepends=True), after.splitlines(keepends=True), *diff_labels(path), n=3)
    return "".join(line if line.endswith("\n") else line + "\n" for line in diff).rstrip("\n")


class StrReplaceArgs(BaseModel):
    path: str = Field(description="file to edit")
    old_str: str = Field(min_length=1, description="exact text to replace; must occur exactly once")
    new_str: str = Field("", description="replacement text (empty deletes old_str)")


class StrReplaceTool(Tool):
    """Replace the one occurrence of `old_str` in a file with `new_str`. `old_str` must match
    exactly (whitespace and indentation included) and occur exactly once: include enough
    surrounding lines to make it unique. Answers with a diff of the change."""

    name = "str_replace"
    Args = StrReplaceArgs

    def run(self, args: StrReplaceArgs) -> ToolResult:
        path = self.ctx.resolve(args.path)
        try:
            text = read_text(self.ctx, path)
        except ValueError as exc:
            return _error(str(exc))
        old, new = args.old_str, args.new_str
        if "\r\n" in text and old not in text:  # the model writes \n; the file uses CRLF
            old, new = old.replace("\n", "\r\n"), new.replace("\n", "\r\n")
        count = text.count(old)
        if count == 0:
            return _error(f"old_str was not found in {path}; nothing changed." + _near_misses(text, args.old_str))
        if count > 1:
            starts, at = [], -1
            while (at := text.find(old, at + 1)) != -1:
                starts.append(str(text.count("\n", 0, at) + 1))
            return _error(
                f"old_str occurs {count} times in {path} (starting at lines {', '.join(starts)}); "
                "include more surrounding lines so it matches exactly once. Nothing changed."
            )
        after = text.replace(old, new, 1)
        write_keeping_mode(self.ctx, path, after)
        return ToolResult(output=f"edited {path}:\n{unified_diff(path, text, after)}")


def _near_misses(text: str, old: str) -> str:
    first = next((ln.strip() for ln in old.splitlines() if ln.strip()), "")
    if not first:
        return ""
    hits = [str(n) for n, ln in enumerate(text.splitlines(), 1) if first in ln][:5]
    if not hits:
        return " No line contains its first line either; view the file to copy the text exactly."
    return f" Its first line appears at line(s) {', '.join(hits)}: check whitespace, indentation and the following lines."


class InsertArgs(BaseModel):
    path: str = Field(description="file to edit")
    insert_line: int = Field(ge=0, description="insert after this line (0 = at the top)")
    text: str = Field(description="text to insert")


class InsertTool(Tool):
    """Insert text after line `insert_line` of a file (0 inserts at the top). Answers with a diff."""

    name = "insert"
    Args = InsertArgs

    def run(self, args: InsertArgs) -> ToolResult:
        path = self.ctx.resolve(args.path)
        data = self.ctx.sandbox.read_file(path)
        if image_type(data) is not None:
            return _view_image(data, path)
        try:
            text = decode_text(data, path)
        except ValueError as exc:
            return _error(str(exc))
        lines = text.splitlines(keepends=True)
        if args.insert_line > len(lines):
            return _error(f"insert_line {args.insert_line} is past the end of {path} ({len(lines)} lines)")
        if lines and not lines[-1].endswith("\n") and args.insert_line == len(lines):
            lines[-1] += "\n"
        new = args.text if args.text.endswith("\n") else args.text + "\n"
        after = "".join(lines[: args.insert_line]) + new + "".join(lines[args.insert_line :])
        write_keeping_mode(self.ctx, path, after)
        return ToolResult(output=f"edited {path}:\n{unified_diff(path, text, after)}")
