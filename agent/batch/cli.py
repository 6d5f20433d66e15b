"""`horizon batch JOBS.jsonl --model SPEC --out DIR [-j N] [--resume] [--branch-prefix P] [--keep-workspaces]`.

Exit status: 0 when every job ran to a verdict (fixed, tests-failed or no-change) and every line
of the jobs file was valid; 1 when some job ended in `error` or some line was rejected; 2 when
nothing could run at all; 130 when stopped (finished jobs stay recorded for --resume).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def register(subparsers) -> None:
    p = subparsers.add_parser("batch", help="run the agent over a JSONL of repository-fix jobs")
    p.add_argument("jobs", help="JSONL file: one job per line (id, repo, base_ref, task|issue_file, setup, test, limits)")
    p.add_argument("--model", help="embedded:PATH | openai:URL | replay:FILE (a job's own 'model' wins)")
    p.add_argument("--out", required=True, help="output folder (results.jsonl, summary.json, jobs/<id>/)")
    p.add_argument("-j", "--jobs-parallel", dest="concurrency", type=int, default=1, help="jobs run at once")
    p.add_argument("--resume", action="store_true", help="skip jobs already in OUT/results.jsonl")
    p.add_argument("--branch-prefix", help="commit each fix to branch PREFIX<id> in the job's local repository")
    p.add_argument("--config", help="agent config TOML")
    p.add_argument("--max-steps", type=int, help="default step limit per job")
    p.add_argument("--timeout", type=float, help="default wall-clock limit per job, seconds")
    p.add_argument("--image", help="sandbox image (default: the config's, else the base image)")
    p.add_argument("--keep-workspaces", action="store_true",
                   help="keep each job's checkout as the agent left it, in OUT/jobs/<id>/workspace")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from agent.batch.execute import JobSettings
    from agent.batch.jobs import JobLineError, load_jobs
    from agent.batch.runner import BatchRunner
    from agent.config import ConfigError, load_config

    if args.concurrency < 1:
        print(f"horizon batch: -j: expected a number >= 1, got {args.concurrency}", file=sys.stderr)
        return 2
    jobs_path = Path(args.jobs)
    if not jobs_path.is_file():
        print(f"horizon batch: jobs file {jobs_path} does not exist", file=sys.stderr)
        return 2
    try:
        config = load_config(args.config, {"max_steps": args.max_steps})
    except ConfigError as exc:
        print(f"horizon batch: {exc}", file=sys.stderr)
        return 2
    if config.sandbox.local:
        print("horizon batch: sandbox.local is not supported: jobs mount their clone into a container", file=sys.stderr)
        return 2
    loaded = load_jobs(jobs_path)
    if args.model is None:
        for job in [j for j in loaded.jobs if j.model is None]:
            loaded.jobs.remove(job)
            message = "no model: give the job a 'model' or pass --model"
            loaded.errors.append(JobLineError(line=loaded.lines[job.id], field="model", message=message, job_id=job.id))
    if not loaded.jobs and loaded.errors:
        for error in loaded.errors:
            print(f"invalid job: {error}", file=sys.stderr)
        print("horizon batch: no valid jobs", file=sys.stderr)
        return 2
    settings = JobSettings(
        model=args.model,
        config=config,
        base_dir=loaded.base_dir,
        default_timeout_s=args.timeout or config.time_limit_s,
        sandbox_factory=docker_sandbox_factory(args.image or config.sandbox.image, config),
        keep_workspaces=args.keep_workspaces,
    )
    try:
        runner = BatchRunner(
            loaded.jobs, loaded.errors, settings, Path(args.out),
            concurrency=args.concurrency, resume=args.resume, branch_prefix=args.branch_prefix,
        )
    except FileExistsError as exc:
        print(f"horizon batch: {exc}", file=sys.stderr)
        return 2
    from agent.cli.signals import on_termination

    try:
        with on_termination():  # kill / a closed terminal stop like Ctrl-C: running jobs' sandboxes are removed
            summary = runner.run()
    except KeyboardInterrupt:
        print("horizon batch: stopped; rerun with --resume to finish the remaining jobs", file=sys.stderr)
        return 130
    return 1 if summary.by_status.get("error") or summary.invalid_lines else 0


# The checkout belongs to a host user, not to the container's root: without this, git in an image
# that does not trust every directory refuses to work in it ("detected dubious ownership").
SAFE_WORKSPACE_GIT = {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "safe.directory", "GIT_CONFIG_VALUE_0": "/workspace"}


def docker_sandbox_factory(image: str | None, config):
    """Each job's clone mounted at /workspace of its own container (LocalSandbox cannot mount)."""
    from sandbox import BASE_IMAGE, Mount, Sandbox, SandboxConfig

    def start(workspace: Path):
        sandbox_config = SandboxConfig(
            image=image or BASE_IMAGE,
            workdir="/workspace",
            network=config.sandbox.network,
            mounts=[Mount(source=str(workspace), target="/workspace")],
            env={"PYTHONDONTWRITEBYTECODE": "1", **SAFE_WORKSPACE_GIT},
            **({"memory": config.sandbox.memory} if config.sandbox.memory else {}),
            **({"cpus": config.sandbox.cpus} if config.sandbox.cpus else {}),
        )
        return Sandbox.start(sandbox_config)

    return start
