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

    parser.set_defaults(func=lambda _args: (parser.print_help(), 2)[1])


def _build(args: argparse.Namespace) -> int:
    from sandbox.base_image import ensure_base_image
    from sandbox.errors import SandboxError

    log = (lambda _m: None) if args.quiet else (lambda m: print(f"[sandbox build] {m}", flush=True))
    try:
        result = ensure_base_image(force=args.force, log=log)
    except SandboxError as exc:
        print(f"horizon sandbox build: {exc}", file=sys.stderr)
        return 1
    if not args.quiet:
        print(f"{result.tag}: {result.action} ({result.image_id[:19]})")
    return 0
