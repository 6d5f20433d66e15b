"""`horizon sandbox ...`: build the base image, run the demo, open a shell, clean up leftovers."""

from __future__ import annotations

import argparse
import sys


def register(subparsers) -> None:
    parser = subparsers.add_parser("sandbox", help="Docker sandboxes: build the base image, demo, shell, gc")
    sub = parser.add_subparsers(dest="sandbox_command", metavar="ACTION")

    build = sub.add_parser("build", help="build the base image offline (debootstrap + docker import) if needed")
    build.add_argument("--force", action="store_true", help="rebuild even when the recipe is unchanged")
    build.add_argument("--quiet", action="store_true", help="print nothing unless something fails")
    build.set_defaults(func=_build)

    demo = sub.add_parser("demo", help="start a sandbox, run commands in its persistent shell, copy files in and out")
    demo.add_argument("--image", default=None, help="image to start (default: the base image)")
    demo.set_defaults(func=_demo)

    shell = sub.add_parser("shell", help="an interactive persistent shell in a fresh sandbox")
    shell.add_argument("--image", default=None)
    shell.add_argument("--network", action="store_true", help="give the sandbox network access")
    shell.add_argument("--timeout", type=float, default=120.0, help="seconds per command")
    shell.set_defaults(func=_shell)

    gc = sub.add_parser("gc", help="remove sandbox containers and egress networks left behind by crashed runs")
    gc.add_argument("--older-than", default="0", help="only containers at least this old (30s, 15m, 2h, 1d)")
    gc.add_argument("--run", default=None, help="only containers of this run id ($HORIZON_RUN_ID)")
    gc.set_defaults(func=_gc)

    parser.set_defaults(func=lambda _args: (parser.print_help(), 2)[1])


def _fail(command: str, exc: Exception) -> int:
    print(f"horizon sandbox {command}: {exc}", file=sys.stderr)
    return 1


def _build(args: argparse.Namespace) -> int:
    from sandbox.base_image import ensure_base_image
    from sandbox.errors import SandboxError

    log = (lambda _m: None) if args.quiet else (lambda m: print(f"[sandbox build] {m}", flush=True))
    try:
        result = ensure_base_image(force=args.force, log=log)
    except SandboxError as exc:
        return _fail("build", exc)
    if not args.quiet:
        print(f"{result.tag}: {result.action} ({result.image_id[:19]})")
    return 0


def _config(args: argparse.Namespace, **extra):
    from sandbox.config import SandboxConfig

    fields = {k: v for k, v in extra.items() if v is not None}
    if args.image:
        fields["image"] = args.image
    return SandboxConfig(**fields)


def _demo(args: argparse.Namespace) -> int:
    from sandbox.demo import run_demo
    from sandbox.errors import SandboxError

    try:
        return run_demo(_config(args, memory="512m", pids_limit=256))
    except SandboxError as exc:
        return _fail("demo", exc)


def _shell(args: argparse.Namespace) -> int:
    from sandbox.docker_sandbox import Sandbox
    from sandbox.errors import SandboxError

    try:
        with Sandbox.start(_config(args, network=args.network, command_timeout=args.timeout)) as sb:
            print(f"sandbox {sb.container_id[:12]} ({sb.config.image}); type 'exit' or Ctrl-D to leave")
            while True:
                try:
                    line = input("sandbox$ ")
                except EOFError:
                    print()
                    return 0
                if line.strip() in ("exit", "logout"):
                    return 0
                if not line.strip():
                    continue
                result = sb.exec(line)
                sys.stdout.write(result.output if result.output.endswith("\n") or not result.output
                                 else result.output + "\n")
                if result.exit_code:
                    print(f"[exit {result.exit_code}]")
    except SandboxError as exc:
        return _fail("shell", exc)


def _gc(args: argparse.Namespace) -> int:
    from sandbox.errors import SandboxError
    from sandbox.gc import collect_garbage, parse_duration

    try:
        removed = collect_garbage(older_than=parse_duration(args.older_than), run_id=args.run)
    except (SandboxError, ValueError) as exc:
        return _fail("gc", exc)
    for r in removed:
        print(f"removed {r.kind} {r.name} (run {r.run_id or '?'}, {r.age_seconds:.0f}s old)")
    containers = sum(r.kind == "container" for r in removed)
    print(f"{containers} sandbox container(s) and {len(removed) - containers} egress network(s) removed")
    return 0
