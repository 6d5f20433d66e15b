"""`horizon eval PATH ...` and `horizon eval validate PATH`."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import time
from pathlib import Path


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "eval",
        usage="horizon eval [validate] PATH [options]",
        help="run an agent over Terminal-Bench, SWE-style or CyberGym-style tasks (or `eval validate PATH`)",
        description="Run an agent over a task suite, or `horizon eval validate PATH` to check that the "
        "oracle solves every task and nop none. Formats are detected per task.",
    )
    p.add_argument("path", nargs="+", metavar="PATH", help="task folder, suite folder or SWE-bench JSON/JSONL/parquet")
    p.add_argument("--agent", choices=["horizon", "oracle", "nop", "predictions"], default="oracle")
    p.add_argument("--predictions", type=Path, metavar="FILE",
                   help="SWE-bench predictions.jsonl to grade (implies --agent predictions)")
    p.add_argument("--model", help="model backend spec for --agent horizon (replay:FILE, openai:URL, embedded:PATH)")
    p.add_argument("-j", "--jobs", type=_positive_int, default=1, help="trials run in parallel (default 1)")
    p.add_argument("--out", type=Path, help="output folder (default eval-out/<agent>-<time>)")
    p.add_argument("--attempts", type=_positive_int, default=1, help="attempts per task, for pass@k (default 1)")
    p.add_argument("--timeout-multiplier", type=_positive_float, default=1.0, help="scales every task timeout")
    p.add_argument("--filter", action="append", default=[], metavar="GLOB", help="only task ids matching GLOB (repeatable)")
    p.add_argument("--resume", action="store_true", help="skip trials already in OUT/results.jsonl")
    p.add_argument("--config", type=Path, help="eval config TOML (engines, image substitutions, retries, agent)")
    p.add_argument("--pull", choices=["always", "missing", "never"],
                   help="pull images: always, only when missing locally (default), or never")
    p.add_argument("--offline-substitute", action="store_true", default=None,
                   help="run base images that cannot be had (python:*, ubuntu:*, debian:*, t-bench) on the Horizon "
                        "base; the score is then marked not comparable")
    p.add_argument("--network", choices=["task", "public", "no-network"],
                   help="the agent phase's network for every task (default: each task format's own default)")
    p.add_argument("--quiet", action="store_true", help="no live progress")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from evals.config import ConfigError, load_config
    from evals.runner import ResultsExist, RunOptions, render_table, run_eval
    from evals.validate import validate_suite

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    # SIGTERM (CI timeouts, `kill`) stops like Ctrl-C, so the sandboxes are removed on the way out.
    signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        print(f"horizon eval: {exc}", file=sys.stderr)
        return 2
    overrides = {k: v for k, v in (("pull", args.pull), ("offline_substitute", args.offline_substitute),
                                   ("network", args.network)) if v is not None}
    config = config.model_copy(update=overrides)
    validate = args.path[0] == "validate" and len(args.path) == 2
    if len(args.path) != 1 and not validate:
        print("horizon eval: expected PATH or `validate PATH`", file=sys.stderr)
        return 2
    path = Path(args.path[-1])
    if not path.exists():
        print(f"horizon eval: no such path: {path}", file=sys.stderr)
        return 2
    stamp = time.strftime("%Y%m%d-%H%M%S")
    if validate:
        out = args.out or Path("eval-out") / f"validate-{stamp}"
        try:
            report = validate_suite(path, out, jobs=args.jobs, config=config, filters=args.filter, progress=not args.quiet)
        except ValueError as exc:
            print(f"horizon eval: {exc}", file=sys.stderr)
            return 2
        print(report.render())
        print(f"results: {out}")
        return 0 if report.valid else 1
    agent = "predictions" if args.predictions else args.agent
    options = RunOptions(agent=agent, predictions=args.predictions, model=args.model, jobs=args.jobs, out_dir=args.out or Path("eval-out") / f"{agent}-{stamp}",
                         attempts=args.attempts, timeout_multiplier=args.timeout_multiplier, filters=args.filter,
                         resume=args.resume, progress=not args.quiet)
    try:
        summary = run_eval(path, options, config)
    except (ResultsExist, ValueError) as exc:
        print(f"horizon eval: {exc}", file=sys.stderr)
        return 2
    print(render_table(summary))
    print(f"results: {options.out_dir / 'results.jsonl'}  summary: {options.out_dir / 'summary.json'}")
    return 0


def _raise_keyboard_interrupt(signum, frame):
    raise KeyboardInterrupt
