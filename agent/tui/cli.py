"""`horizon chat [PATH] --model SPEC [--read-only] [--resume [ID]]`."""

from __future__ import annotations

import argparse
import os
import sys
import threading
from contextlib import ExitStack
from pathlib import Path

from agent.tui.approval import MODES

THEMES = {"dark": "textual-dark", "light": "textual-light"}


def register(subparsers) -> None:
    p = subparsers.add_parser("chat", help="interactive coding assistant on a repository (Textual TUI)")
    p.add_argument("path", nargs="?", default=".", help="repository to work on (default: current folder)")
    p.add_argument("--model", help="embedded:PATH | openai:URL | replay:FILE (default: the resumed session's)")
    p.add_argument("--read-only", action="store_true", help="mount the repository read-only in the sandbox")
    p.add_argument("--resume", nargs="?", const="", metavar="ID", help="restore a session (default: the latest)")
    p.add_argument("--mode", choices=MODES, default="ask", help="approval mode to start in")
    p.add_argument("--effort", choices=supported_efforts(),
                   help="reasoning effort: none (no thinking) .. max; default: the model's own (max)")
    p.add_argument("--theme", choices=("dark", "light"), default="dark", help="colour theme (Ctrl+P switches later)")
    p.add_argument("--config", help="agent config TOML")
    p.set_defaults(func=run)


def supported_efforts() -> list[str]:
    from agent.tui.slash import supported_efforts as efforts

    return efforts()


def run(args: argparse.Namespace) -> int:
    from agent.backends import make_backend
    from agent.config import ConfigError, load_config
    from agent.tui.session import SessionStore

    repo = Path(args.path).resolve()
    if not repo.is_dir():
        print(f"horizon chat: {repo} is not a folder", file=sys.stderr)
        return 2
    store = SessionStore()
    resuming = args.resume is not None
    model = args.model
    if resuming:  # an unknown id is a usage error here, not a crash inside the app
        try:
            resumed = store.open(args.resume or None)
        except LookupError as exc:
            print(f"horizon chat: --resume: {exc}; {_how_to_see_sessions(store)}", file=sys.stderr)
            return 2
        model = model or resumed.meta.model
    if model is None:
        print("horizon chat: --model is required (embedded:PATH | openai:URL | replay:FILE)", file=sys.stderr)
        return 2
    from agent.tui.slash import effort_setting

    effort = effort_setting(args.effort) if args.effort else None
    try:
        # A chat turn ends when the model answers without a tool call; headless runs need `finish`.
        config = load_config(args.config, {"require_finish_tool": False, "reasoning_effort": effort})
        backend = make_backend(model, config)
    except (ConfigError, Exception) as exc:
        print(f"horizon chat: {exc}", file=sys.stderr)
        return 2
    if config.sandbox.local:
        print("horizon chat: sandbox.local is not supported: the chat mounts the repository into a container",
              file=sys.stderr)
        return 2
    # kill / a closed terminal: like Ctrl+Q once the app is up (session saved), else unwind like Ctrl-C;
    # either way the `with` removes the container.
    apps: list = []
    try:
        return _run_app(args, repo, store, config, backend, model, resumed if resuming else None, apps)
    finally:
        # The backend current at exit (after any /model switch) holds the model: close it.
        (apps[0].controller.backend if apps else backend).close()


def _run_app(args, repo, store, config, backend, model, resumed, apps: list) -> int:
    from agent.backends import make_backend
    from agent.cli.signals import on_termination
    from agent.mcp_tools import MCPError
    from agent.tools.registry import PluginError, build_toolset
    from agent.tui.app import ChatApp

    resuming = resumed is not None
    with on_termination(), open_workspace_sandbox(repo, args.read_only, config) as sandbox, ExitStack() as stack:
        # The same tools as `horizon run`: built-ins minus disabled_tools, enabled plugins, MCP servers.
        try:
            tools, connections = build_toolset(config, sandbox)
        except (PluginError, MCPError) as exc:
            print(f"horizon chat: {exc}", file=sys.stderr)
            return 2
        stack.callback(tools.close)
        for conn in connections:
            stack.callback(conn.close)
        app = ChatApp(
            config=config,
            backend=backend,
            tools=tools,
            sandbox=sandbox,
            store=store,
            repo=repo,
            model_spec=model,
            read_only=args.read_only,
            make_backend=make_backend,
            resume_id=resumed.meta.id if resuming else None,
            resume_latest=resuming and not args.resume,
        )
        apps.append(app)
        app.theme = THEMES[args.theme]
        app.controller.policy.mode = args.mode
        app.stats.mode = args.mode
        app_done = threading.Event()
        with on_termination(_quit_on_signal(app, sandbox, app_done)):
            app.run()
        app_done.set()
    try:
        print(f"session saved: {app.controller.session.id} (horizon chat --resume {app.controller.session.id})")
    except OSError:  # the terminal is gone (SIGHUP); the session is on disk all the same
        pass
    return 0


def _quit_on_signal(app, sandbox, app_done: threading.Event, grace_s: float = 20.0):
    """Quit as Ctrl+Q does. When the terminal is gone (SIGHUP), Textual's shutdown can block on
    output nobody reads; if the app has not finished after `grace_s`, remove the container and leave."""

    def force_quit() -> None:
        if app_done.wait(grace_s):
            return
        try:
            app.controller.session.save_meta()
            sandbox.close()
        finally:
            os._exit(129)

    def stop() -> None:
        app.request_quit()
        threading.Thread(target=force_quit, name="horizon-force-quit", daemon=True).start()

    return stop


def _how_to_see_sessions(store) -> str:
    recent = [meta.id for meta in store.list()[:5]]
    where = f"saved sessions are folders under {store.root}"
    if not recent:
        return where
    return f"recent: {', '.join(recent)} ({where}; /sessions in a chat lists them; --resume alone takes the latest)"


def open_workspace_sandbox(repo: Path, read_only: bool, config):
    """The repository mounted at /workspace (read-write unless asked otherwise)."""
    from sandbox import BASE_IMAGE, Mount, Sandbox, SandboxConfig

    settings = config.sandbox
    sandbox_config = SandboxConfig(
        image=settings.image or BASE_IMAGE,
        workdir=settings.workdir,
        network=settings.network,
        mounts=[Mount(source=str(repo), target=settings.workdir, read_only=read_only)],
        # The repository is the user's own checkout: no root-owned __pycache__ folders left in it.
        env={"PYTHONDONTWRITEBYTECODE": "1"},
        **({"memory": settings.memory} if settings.memory else {}),
        **({"cpus": settings.cpus} if settings.cpus else {}),
    )
    return Sandbox.start(sandbox_config)
