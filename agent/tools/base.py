"""The tool plugin API: a tool is a pydantic argument model, a docstring and a `run` method.

    class WordCountArgs(BaseModel):
        path: str = Field(description="file to count words in")

    class WordCount(Tool):
        '''Count the words of a file in the workspace.'''
        name = "word_count"
        Args = WordCountArgs
        read_only = True

        def run(self, args: WordCountArgs) -> str:
            return str(len(self.ctx.sandbox.read_file(self.ctx.resolve(args.path)).split()))

The JSON schema the model sees comes from `Args`, the description from the docstring. Arguments are
validated before `run` is called; a validation error goes back to the model as the tool's result.
`function_tool` turns a plain function `fn(args: SomeArgs, ctx: ToolContext) -> str` into a Tool.

A tool that can stop early when the user interrupts overrides `run_cancellable(args, cancel)`
instead of `run`: the ToolSet hands it an event that is set on interrupt (bash passes it to
`Sandbox.exec`). Tools that only implement `run` keep working unchanged.
"""

from __future__ import annotations

import inspect
import json
import posixpath
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, ClassVar, get_type_hints

from pydantic import BaseModel

from agent.config import ToolLimits
from inference.chat.content_parts import ImagePart
from inference.chat.messages import ToolSpec

if TYPE_CHECKING:
    from sandbox import ExecResult, Sandbox


class ToolResult(BaseModel):
    """What a tool call produced. `output` is what the model sees."""

    output: str
    is_error: bool = False
    exit_code: int | None = None
    truncated: bool = False
    # Set by the `finish` tool: the run ends after this call with `summary`.
    finish: bool = False
    summary: str = ""
    # Images the model sees with `output` (`view` on an image file), when its backend has vision.
    images: list[ImagePart] = []


@dataclass
class ToolContext:
    """What tools run against: the sandbox, output limits, and the workspace folder."""

    sandbox: Sandbox
    limits: ToolLimits = field(default_factory=ToolLimits)
    workdir: str = "/workspace"

    def resolve(self, path: str) -> str:
        """Relative paths are relative to the workspace, not to wherever bash has cd'ed."""
        return posixpath.normpath(path if path.startswith("/") else f"{self.workdir.rstrip('/')}/{path}")

    def read_bytes(self, path: str) -> bytes:
        """A file's bytes, relative paths from the workspace (what the file tools read)."""
        return self.sandbox.read_file(self.resolve(path))

    def shell_path(self, path: str) -> str:
        """A path for a `run_once` command line: relative when inside the workspace, so commands
        work the same in a container and in a LocalSandbox (whose workspace is a host temp dir)."""
        path = self.resolve(path)
        workdir = posixpath.normpath(self.workdir)
        if path == workdir:
            return "."
        if path.startswith(workdir + "/"):
            return "./" + posixpath.relpath(path, workdir)
        return path

    def run_once(self, script: str, timeout: float = 120) -> ExecResult:
        """Run a bash script as its own process in the workspace (not in the agent's shell)."""
        return self.sandbox.exec_once(["bash", "-o", "pipefail", "-c", script], timeout=timeout, workdir=self.workdir)


class Tool:
    """Base class of every tool. Subclasses set `name`, `Args` and a docstring, and implement `run`."""

    name: ClassVar[str]
    Args: ClassVar[type[BaseModel]]
    # MCP-style annotation: approval front-ends auto-approve read-only tools.
    read_only: ClassVar[bool] = False
    # Tools that bound their own running time (bash passes its timeout to the sandbox) set this;
    # the others are run under `ToolLimits.tool_timeout_s` by the ToolSet.
    manages_timeout: ClassVar[bool] = False

    def __init__(self, ctx: ToolContext):
        self.ctx = ctx

    @classmethod
    def description(cls) -> str:
        return inspect.cleandoc(cls.__doc__ or "").strip() or cls.name

    @classmethod
    def parameters(cls) -> dict[str, Any]:
        schema = cls.Args.model_json_schema()
        schema.pop("title", None)
        props = schema.get("properties", {})
        for key, prop in list(props.items()):
            prop.pop("title", None)
            # `X | None = None` is just an optional X to the model: a plain type parses better.
            variants = prop.get("anyOf")
            if isinstance(variants, list) and len(variants) == 2 and {"type": "null"} in variants:
                prop.pop("anyOf")
                props[key] = {**next(v for v in variants if v != {"type": "null"}), **prop}
                if props[key].get("default", 0) is None:
                    props[key].pop("default")
        return schema

    def validate(self, raw_args: dict[str, Any]) -> BaseModel:
        # Text-format tool calls may carry lists/numbers as JSON strings; decode those first.
        props = self.parameters().get("properties", {})
        fixed = dict(raw_args)
        for key, value in raw_args.items():
            wanted = props.get(key, {}).get("type")
            if isinstance(value, str) and wanted in ("array", "object", "integer", "number", "boolean"):
                try:
                    fixed[key] = json.loads(value)
                except json.JSONDecodeError:
                    pass  # let validation report it
        return self.Args.model_validate(fixed)

    @classmethod
    def spec(cls) -> ToolSpec:
        return ToolSpec(name=cls.name, description=cls.description(), parameters=cls.parameters())

    def run(self, args: Any) -> ToolResult | str:
        raise NotImplementedError

    def run_cancellable(self, args: Any, cancel: threading.Event) -> ToolResult | str:
        """`run` for one call the user may interrupt: `cancel` is set when they do, possibly before
        this is even entered, and is never cleared. The ToolSet calls this; the default ignores the
        event and calls `run`. A tool that can stop early overrides it and looks at the event (a
        level, unlike `cancel()`, so an interrupt racing the start of the work is not lost)."""
        return self.run(args)

    def cancel(self) -> None:
        """Stop this tool's `run` in flight; called from another thread when the user interrupts,
        after the call's `cancel` event was set. Tools that cannot be stopped leave it alone: the
        agent stops waiting for them anyway."""

    def close(self) -> None:
        """Release resources (MCP sessions); most tools hold none."""


def function_tool(
    fn: Callable[[Any, ToolContext], ToolResult | str] | None = None,
    *,
    name: str | None = None,
    read_only: bool = False,
):
    """Make a Tool class from `fn(args: ArgsModel, ctx: ToolContext)`; its docstring describes it."""

    def wrap(f: Callable[[Any, ToolContext], ToolResult | str]) -> type[Tool]:
        hints = get_type_hints(f)
        params = list(inspect.signature(f).parameters)
        args_model = hints.get(params[0]) if params else None
        if not (isinstance(args_model, type) and issubclass(args_model, BaseModel)):
            raise TypeError(f"{f.__name__}: first parameter must be annotated with a pydantic model")

        def run(self: Tool, args: Any) -> ToolResult | str:
            return f(args, self.ctx)

        return type(
            f"{f.__name__.title().replace('_', '')}Tool",
            (Tool,),
            {
                "__doc__": f.__doc__,
                "__module__": f.__module__,
                "name": name or f.__name__,
                "Args": args_model,
                "read_only": read_only,
                "run": run,
            },
        )

    return wrap(fn) if fn is not None else wrap


def format_validation_error(tool: str, exc: Exception) -> str:
    errors = getattr(exc, "errors", None)
    if not callable(errors):
        return f"invalid arguments for {tool}: {exc}"
    lines = []
    for err in errors():
        loc = ".".join(str(p) for p in err["loc"]) or "(arguments)"
        if err["type"] == "missing":
            lines.append(f"- {loc}: required argument is missing")
        elif err["type"] == "extra_forbidden":
            lines.append(f"- {loc}: unknown argument")
        else:
            lines.append(f"- {loc}: {err['msg']} (got {err.get('input')!r})")
    return f"invalid arguments for {tool}:\n" + "\n".join(lines)


def run_with_deadline(
    fn: Callable[[], Any], timeout: float | None, cancel: threading.Event | Iterable[threading.Event] | None
) -> Any:
    """Run `fn` in a worker thread; raise TimeoutError past `timeout` or InterruptedError once `cancel`
    (an event, or any of several) is set.

    Python cannot kill a thread, so a tool that ignores both keeps running in the background; what
    matters is that the agent (and the user's interrupt) is not blocked behind it.
    """
    box: dict[str, Any] = {}
    done = threading.Event()

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # handed to the caller's thread below
            box["error"] = exc
        finally:
            done.set()

    cancels = [] if cancel is None else [cancel] if isinstance(cancel, threading.Event) else list(cancel)
    threading.Thread(target=target, daemon=True, name="horizon-tool").start()
    deadline = None if timeout is None else time.monotonic() + timeout
    while not done.wait(0.05):
        if any(event.is_set() for event in cancels):
            raise InterruptedError("interrupted by the user")
        if deadline is not None and time.monotonic() >= deadline:
            raise TimeoutError(f"tool did not finish within {timeout:g}s")
    if "error" in box:
        raise box["error"]
    return box.get("value")
