"""The `horizon` command: a thin dispatcher over subcommands that each package registers.

Subcommands come from the `horizon.commands` entry-point group (see pyproject.toml). Each entry
point is a `register(subparsers) -> None` function that adds one argparse subparser and sets
`func` on it. Discovering them through entry points keeps the dependency direction one way:
this module never imports `evals`, yet `horizon eval` works when `evals` is installed.
"""

from __future__ import annotations

import argparse
import sys
from importlib import metadata

ENTRY_POINT_GROUP = "horizon.commands"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="horizon",
        description="Horizon: an agentic coding runtime for long-horizon tool use (GLM-5.x).",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for ep in sorted(metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        try:
            register = ep.load()
        except ImportError as exc:
            # A half-installed extra must not take the whole CLI down; say which command is gone.
            broken = sub.add_parser(ep.name, help=f"(unavailable: {exc})")
            broken.set_defaults(func=_unavailable(ep.name, exc))
            continue
        register(sub)
    return parser


def _unavailable(name: str, exc: Exception):
    def run(_args: argparse.Namespace) -> int:
        print(f"horizon {name}: unavailable in this installation: {exc}", file=sys.stderr)
        return 2

    return run


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0 if args.command is None else 2
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
