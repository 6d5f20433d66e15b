"""`horizon run "task" --repo PATH --model SPEC`: one headless agent run on a copy of a repository.

The repository is copied into a fresh sandbox (the original is never touched), the agent works
there, and the change it made comes back as a `git diff` patch (`--patch-out`). Every event goes
to a trajectory file as it happens; `--resume FILE` continues an interrupted run from it: a fresh
copy of the repository gets the last checkpointed patch re-applied, and the conversation goes on.
Exit status: 0 finished, 3 a limit was hit, 130 interrupted, 1 error, 2 bad invocation.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
import tomllib
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Keep tools from paging or prompting, and caches out of the diff (mini-swe-agent does the same).
AGENT_ENV = {"PAGER": "cat", "GIT_PAGER": "cat", "MANPAGER": "cat", "PIP_PROGRESS_BAR": "off", "TQDM_DISABLE": "1",
             "PYTHONDONTWRITEBYTECODE": "1", "GIT_TERMINAL_PROMPT": "0"}
EXIT_CODES = {"submitted": 0, "step_limit": 3, "token_budget": 3, "time_limit": 3, "interrupted": 130, "error": 1}


def register(subparsers) -> None:
    p = subparsers.add_parser("run", help="run the agent headless on a task in a sandboxed copy of a repository")
    p.add_argument("task", nargs="?", help="what to do (omit with --resume)")
    p.add_argument("--repo", help="repository folder to copy into the sandbox (default: current folder)")
    p.add_argument("--model", help="embedded:PATH | openai:URL | replay:FILE")
    p.add_argument("--max-steps", type=int, help="model calls before stopping")
    p.add_argument("--reasoning-effort", help="none (no thinking) | low | medium | high | max (default: the model's own)")
    p.add_argument("--json", action="store_true", help="print every event as a JSON line on stdout")
    p.add_argument("--patch-out", metavar="FILE", help="write the resulting git diff here ('-' for stdout)")
    p.add_argument("--trajectory", metavar="FILE", help="event log (JSONL); default under ~/.cache/horizon/runs")
    p.add_argument("--resume", metavar="FILE", help="continue the run recorded in this trajectory")
    p.add_argument("--config", metavar="FILE", help="agent config (TOML)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config value, e.g. --set context.compact_trigger=0.7 (repeatable)")
    p.add_argument("--local", action="store_true", help="run tools on the host (LocalSandbox): NO isolation")
    p.add_argument("--list-tools", action="store_true", help="list built-in tools and installed plugins, then exit")
    p.set_defaults(func=run)


@dataclass
class RunPlan:
    task: str
    repo: Path
    model: str
    config: Any  # AgentConfig
    trajectory: Path
    resume: Any = None  # TrajectoryState
    resume_from: Path | None = None


def run(args: argparse.Namespace) -> int:
    from agent.config import ConfigError
    from agent.trajectory import TrajectoryError

    if args.list_tools:
        return list_tools()
    if args.json and args.patch_out == "-":  # stdout carries one JSON event per line; a diff would break it
        print("horizon run: --patch-out - cannot be combined with --json (stdout holds the JSON events); "
              "write the patch to a file, or read it from the trajectory's last workspace_checkpoint event",
              file=sys.stderr)
        return 2
    try:
        plan = make_plan(args)
    except (ConfigError, TrajectoryError, ValueError) as exc:
        print(f"horizon run: {exc}", file=sys.stderr)
        return 2
    from agent.cli.signals import on_termination

    with on_termination():  # kill / a closed terminal unwind like Ctrl-C: the sandbox is removed
        return execute(plan, json_events=args.json, patch_out=args.patch_out)


def list_tools() -> int:
    from agent.tools.builtins import BUILTIN_TOOL_CLASSES
    from agent.tools.registry import available_plugins

    print("built-in tools:")
    for cls in BUILTIN_TOOL_CLASSES:
        first_sentence = " ".join(cls.description().split()).split(". ")[0].rstrip(".")
        print(f"  {cls.name:12s} {first_sentence}")
    plugins = available_plugins()
    print("installed plugins (enable with plugins = [...] in the config):" if plugins else "no plugins installed")
    for name, ep in sorted(plugins.items()):
        print(f"  {name:12s} {ep.value}")
    return 0


def _parse_set(items: list[str]) -> dict[str, Any]:
    overrides = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--set {item!r}: expected KEY=VALUE")
        try:  # TOML literal (numbers, booleans, arrays, quoted strings), else a bare string
            value = tomllib.loads(f"v = {raw}")["v"]
        except tomllib.TOMLDecodeError:
            value = raw
        overrides[key.strip()] = value
    return overrides


def make_plan(args: argparse.Namespace) -> RunPlan:
    from agent.config import AgentConfig, load_config
    from agent.trajectory import load_trajectory

    overrides = _parse_set(args.set)
    flags = {"max_steps": args.max_steps, "reasoning_effort": args.reasoning_effort, "model": args.model}
    overrides.update({key: value for key, value in flags.items() if value is not None})
    if args.local:
        overrides["sandbox.local"] = True
    state = None
    if args.resume:
        state = load_trajectory(args.resume)
        if state.finish_reason == "submitted":
            raise ValueError(f"--resume {args.resume}: that run already finished; nothing to continue")
        stored = AgentConfig.model_validate(state.settings.get("config", {})).model_dump(mode="json")
        config = load_config(args.config, {**_flatten(stored), **overrides} if not args.config else overrides)
        task = state.task
        repo = Path(args.repo or state.settings.get("repo") or ".")
    else:
        config = load_config(args.config, overrides)
        if not args.task:
            raise ValueError("a task is required (or --resume FILE)")
        task, repo = args.task, Path(args.repo or ".")
    model = config.model or (state.model if state else None)
    if not model:
        raise ValueError("--model is required (embedded:PATH | openai:URL | replay:FILE)")
    if not repo.is_dir():
        raise ValueError(f"--repo {repo}: not a folder")
    if args.trajectory:
        trajectory = Path(args.trajectory)
    elif args.resume:
        trajectory = Path(args.resume)
    else:
        runs = Path(os.environ.get("HORIZON_RUNS_DIR", Path.home() / ".cache" / "horizon" / "runs"))
        trajectory = runs / f"run-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.jsonl"
    return RunPlan(task=task, repo=repo.resolve(), model=model, config=config, trajectory=trajectory, resume=state,
                   resume_from=Path(args.resume) if args.resume else None)


def _flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict) and value and key not in ("mcp_servers", "engine", "extra_body", "env"):
            flat.update(_flatten(value, f"{prefix}{key}."))
        elif value is not None:
            flat[f"{prefix}{key}"] = value
    return flat


def open_sandbox(config):
    from sandbox import BASE_IMAGE, LocalSandbox, Sandbox, SandboxConfig

    s = config.sandbox
    fields: dict[str, Any] = {"image": s.image or BASE_IMAGE, "workdir": s.workdir, "network": s.network,
                              "env": dict(AGENT_ENV)}
    if s.memory:
        fields["memory"] = s.memory
    if s.cpus:
        fields["cpus"] = s.cpus
    sandbox_config = SandboxConfig(**fields)
    return (LocalSandbox if s.local else Sandbox).start(sandbox_config)


class _Checkpointer:
    """Writes the workspace patch to the trajectory before each model call that follows an edit,
    so `--resume` can rebuild the files as well as the conversation."""

    def __init__(self, workspace, writer, toolset):
        self.workspace, self.writer, self.toolset = workspace, writer, toolset
        self.dirty = False

    def __call__(self, event) -> None:
        from agent.events import ModelRequest, ToolCallEvent, WorkspaceCheckpoint

        if isinstance(event, ToolCallEvent):
            tool = self.toolset[event.name] if event.name in self.toolset else None
            self.dirty = self.dirty or tool is None or not tool.read_only
        elif isinstance(event, ModelRequest) and self.dirty:
            self.dirty = False
            self.writer(WorkspaceCheckpoint(step=event.step, patch=self.workspace.diff()))


def execute(plan: RunPlan, *, json_events: bool = False, patch_out: str | None = None) -> int:
    from agent.backends import BackendError, make_backend
    from agent.cli.progress import JsonEventPrinter, ProgressPrinter
    from agent.cli.signals import on_termination
    from agent.events import RunStart, WorkspaceCheckpoint
    from agent.instructions import build_system_prompt, load_project_instructions
    from agent.images import ImageFileError, mentioned_images
    from agent.loop import Agent, NoVision
    from agent.mcp_tools import MCPError
    from agent.tools.base import ToolContext
    from agent.tools.registry import PluginError, build_toolset
    from agent.trajectory import TrajectoryWriter
    from agent.workspace import SandboxWorkspace, WorkspaceError
    from sandbox import SandboxError

    config, state = plan.config, plan.resume
    workdir = config.sandbox.workdir
    printer = JsonEventPrinter() if json_events else ProgressPrinter()
    if plan.resume_from is not None and plan.resume_from.resolve() != plan.trajectory.resolve():
        plan.trajectory.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(plan.resume_from, plan.trajectory)  # the new file must hold the whole history
    try:
        with ExitStack() as stack:
            backend = make_backend(plan.model, config)
            stack.callback(backend.close)
            if state is not None and hasattr(backend, "skip"):
                # replay: the recorded steps and compaction summaries were already taken
                backend.skip(state.usage.calls, state.usage.compaction_calls)
            sandbox = stack.enter_context(open_sandbox(config))
            workspace = SandboxWorkspace(sandbox, workdir)
            stack.callback(workspace.cleanup)
            workspace.copy_in(plan.repo)
            workspace.snapshot()
            if state is not None and state.checkpoint_patch:
                workspace.apply(state.checkpoint_patch)
            toolset, connections = build_toolset(config, sandbox)
            stack.callback(toolset.close)
            for conn in connections:
                stack.callback(conn.close)
            writer = stack.enter_context(TrajectoryWriter(plan.trajectory, append=state is not None))
            if not json_events:
                print(f"trajectory: {plan.trajectory}", file=sys.stderr)
            writer(RunStart(
                task=plan.task, model=plan.model, resumed=state is not None, step=state.usage.calls if state else 0,
                settings={"repo": str(plan.repo), "config": config.model_dump(mode="json")},
            ))
            checkpointer = _Checkpointer(workspace, writer, toolset)

            def on_event(event) -> None:
                writer(event)
                checkpointer(event)
                printer(event)

            agent = Agent(
                config, backend, toolset, on_event=on_event,
                system_prompt=build_system_prompt(config, load_project_instructions(plan.repo), workdir),
                messages=state.messages if state else None,
                steps_done=state.usage.calls if state else 0,
                usage=state.usage if state else None,
            )
            # `@shot.png` in the task: the image goes with it, read from the sandbox's copy of the repo.
            images = [] if state else mentioned_images(plan.task, ToolContext(sandbox, workdir=workdir).read_bytes)
            with on_termination(_graceful_stop(agent), include_sigint=True):
                result = agent.run(None if state else plan.task, images=images)
            patch = workspace.diff()
            writer(WorkspaceCheckpoint(step=result.steps, patch=patch))
    except (BackendError, SandboxError, PluginError, WorkspaceError, MCPError) as exc:
        print(f"horizon run: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    except (ImageFileError, NoVision) as exc:  # an attachment the model cannot take: a bad invocation
        print(f"horizon run: {exc}", file=sys.stderr)
        return 2
    _write_patch(patch, patch_out)
    if not json_events:
        changed = sum(1 for line in patch.splitlines() if line.startswith("diff --git"))
        if patch_out != "-":  # the final message goes to stdout, progress to stderr
            print(result.summary)
        print(f"finished: {result.reason}", file=sys.stderr)
        print(f"steps {result.steps}, tokens {result.usage.prompt_tokens} prompt "
              f"({result.usage.cached_tokens} cached) + {result.usage.completion_tokens} completion, "
              f"{changed} file(s) changed", file=sys.stderr)
    return EXIT_CODES[result.reason]


def _write_patch(patch: str, patch_out: str | None) -> None:
    if patch_out == "-":
        sys.stdout.write(patch)
    elif patch_out:
        Path(patch_out).parent.mkdir(parents=True, exist_ok=True)
        # surrogateescape round-trips file content that is not UTF-8 byte for byte
        Path(patch_out).write_bytes(patch.encode("utf-8", errors="surrogateescape"))


def _graceful_stop(agent):
    """The first Ctrl-C, SIGTERM or SIGHUP stops the agent cleanly (trajectory and patch are still
    written); a second one aborts."""

    def stop() -> None:
        try:
            print("\ninterrupting (Ctrl-C again to abort)...", file=sys.stderr)
        except OSError:  # the terminal is gone (SIGHUP)
            pass
        agent.interrupt()

    return stop
