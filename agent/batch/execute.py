"""One job, start to finish: clone, sandbox, setup, agent, patch, test, classify.

A job never raises: whatever goes wrong becomes an `error` result with the reason. The job's own
wall-clock limit is enforced from outside the agent by a watchdog that interrupts the agent and
kills the sandbox, so a tool stuck in a long command cannot hold the job past its limit.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Callable

from agent.backends import EnginePool, make_backend
from agent.batch.jobs import BatchJob
from agent.batch.layout import JobPaths
from agent.ownership import give_back
from agent.batch.results import JobResult, classify
from agent.batch.workspace import JobWorkspace, WorkspaceError, prepare_workspace
from agent.config import AgentConfig
from agent.events import RunStart
from agent.instructions import build_system_prompt, load_project_instructions
from agent.loop import Agent, RunResult
from agent.tools.registry import build_toolset
from agent.trajectory import TrajectoryWriter

WORKDIR = "/workspace"


@dataclass
class JobSettings:
    """Batch-wide settings every job starts from (a job's `limits` override them)."""

    model: str | None
    config: AgentConfig
    base_dir: Path
    default_timeout_s: float | None = None
    sandbox_factory: Callable[[Path], AbstractContextManager] | None = None  # workspace -> started sandbox
    engines: EnginePool | None = None  # `embedded:` jobs share one engine; the batch run owns and closes it
    keep_workspaces: bool = False  # leave each job's checkout in its output folder


class JobAborted(Exception):
    """The whole batch is stopping (Ctrl-C / SIGTERM): the job is left unrecorded so --resume reruns it."""


@dataclass
class JobHandle:
    """What the watchdog and a batch-wide stop need to reach inside a running job."""

    job_id: str
    agent: Agent | None = None
    sandbox: object = None
    timed_out: bool = False
    aborted: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)

    def stop(self, *, timeout: bool) -> None:
        with self.lock:
            if timeout:
                self.timed_out = True
            else:
                self.aborted = True
            if self.agent is not None:
                self.agent.interrupt()
            if self.sandbox is not None:
                try:
                    self.sandbox.close()  # kills whatever the agent's tool was running
                except Exception:
                    pass


def run_job(job: BatchJob, settings: JobSettings, paths: JobPaths, handle: JobHandle) -> JobResult:
    started = time.monotonic()
    paths.fresh()
    timeout = job.limits.timeout_s or settings.default_timeout_s
    watchdog = threading.Timer(timeout, handle.stop, kwargs={"timeout": True}) if timeout else None
    workspace: JobWorkspace | None = None
    outcome = _Outcome()
    container_ran = given_back = False
    try:
        workspace = prepare_workspace(job, keep_at=paths.workspace if settings.keep_workspaces else None)
        if watchdog:
            watchdog.start()
        with settings.sandbox_factory(workspace.path) as sandbox:
            container_ran = True
            with handle.lock:
                handle.sandbox = sandbox
            try:
                _run_in_sandbox(job, settings, paths, handle, sandbox, workspace, outcome)
            finally:
                given_back = _give_back(workspace, sandbox)
    except WorkspaceError as exc:
        outcome.error = f"preparing the repository failed: {exc}"
    except Exception as exc:  # sandbox start failures, a sandbox killed by the watchdog, ...
        if not (handle.timed_out or handle.aborted):
            outcome.error = f"{type(exc).__name__}: {exc}"
    finally:
        if watchdog:
            watchdog.cancel()
    if container_ran and not given_back:
        # The watchdog, a stop or a crash ended the job's sandbox first: a short-lived one does it,
        # before the host reads the patch (its git cannot write into root-owned object folders).
        _give_back_from_fresh_sandbox(settings, workspace, outcome)
    if handle.aborted:
        if workspace is not None:
            workspace.remove()
        raise JobAborted(job.id)
    if handle.timed_out:
        outcome.error = f"timed out after {timeout:g}s"
    patch = outcome.patch or ""
    if workspace is not None:  # read on the host: works even when the watchdog killed the sandbox
        if outcome.patch is None:
            patch = _read_patch(workspace, outcome)
        workspace.remove()
    paths.patch.write_text(patch, encoding="utf-8")
    status, reason = classify(patch, outcome.test_exit_code, outcome.error)
    run = outcome.run
    result = JobResult(
        id=job.id,
        status=status,
        reason=reason,
        patch_lines=patch.count("\n"),
        test_exit_code=outcome.test_exit_code,
        steps=run.steps if run else 0,
        prompt_tokens=run.usage.prompt_tokens if run else 0,
        cached_tokens=run.usage.cached_tokens if run else 0,
        completion_tokens=run.usage.completion_tokens if run else 0,
        duration_s=round(time.monotonic() - started, 3),
        finish_reason=run.reason if run else None,
        finish_summary=run.summary if run else None,
        base_commit=workspace.base_commit if workspace else None,
        workspace=str(workspace.path) if workspace is not None and workspace.keep else None,
        warnings=outcome.warnings,
    )
    return result


def _give_back(workspace: JobWorkspace, sandbox) -> bool:
    """Return what the container wrote under the checkout to its owner; False if the sandbox is gone."""
    try:
        give_back(workspace.owner, sandbox, WORKDIR)
        return True
    except Exception:  # closed by the watchdog, container died, chown missing: the caller retries
        return False


def _give_back_from_fresh_sandbox(settings: JobSettings, workspace: JobWorkspace, outcome: "_Outcome") -> None:
    try:
        with settings.sandbox_factory(workspace.path) as sandbox:
            give_back(workspace.owner, sandbox, WORKDIR)
    except Exception as exc:
        outcome.warnings.append(f"could not give the checkout's files back to {workspace.owner}: {exc}")


def _read_patch(workspace: JobWorkspace, outcome: "_Outcome") -> str:
    try:
        return workspace.diff()
    except WorkspaceError as exc:
        outcome.error = outcome.error or f"reading the patch failed: {exc}"
        return ""


@dataclass
class _Outcome:
    patch: str | None = None  # taken before the test command runs, so its artifacts are not in it
    run: RunResult | None = None
    test_exit_code: int | None = None
    error: str | None = None
    warnings: list[str] = field(default_factory=list)


def _close_tools(tools, connections) -> None:
    tools.close()
    for conn in connections:
        conn.close()


def _run_in_sandbox(job, settings, paths, handle, sandbox, workspace: JobWorkspace, outcome: _Outcome) -> None:
    for command in job.setup:
        result = sandbox.exec(command, timeout=job.limits.test_timeout_s)
        if result.exit_code != 0:
            tail = result.output.strip()[-300:]
            outcome.error = f"setup command {command!r} exited with {result.exit_code}: {tail}"
            return
    config = _job_config(settings.config, job)
    task = job.task_text(settings.base_dir)
    model = job.model or settings.model
    with TrajectoryWriter(paths.trajectory) as trajectory:
        trajectory(RunStart(task=task, model=model, settings={"job": job.model_dump(), **config.model_dump()}))
        # The same tools as `horizon run`: plugins, MCP servers and disabled_tools of the config.
        tools, connections = build_toolset(config, sandbox, workdir=WORKDIR)
        system_prompt = build_system_prompt(config, load_project_instructions(workspace.path), WORKDIR)
        try:
            backend = make_backend(model, config, settings.engines)
        except BaseException:
            _close_tools(tools, connections)
            raise
        try:
            agent = Agent(config, backend, tools, on_event=trajectory, system_prompt=system_prompt)
            with handle.lock:
                if handle.timed_out or handle.aborted:
                    return
                handle.agent = agent
            outcome.run = agent.run(task)
        finally:
            backend.close()
            _close_tools(tools, connections)
    if handle.timed_out or handle.aborted:
        return
    if outcome.run.reason == "error":
        outcome.error = f"agent error: {outcome.run.summary}"
        return
    # The agent's files (and its `git commit`'s objects) go to the checkout's owner first: the
    # host's git reads the patch as that owner. (A failure is retried, and reported, at the end.)
    _give_back(workspace, sandbox)
    outcome.patch = _read_patch(workspace, outcome)
    if job.test:
        test = sandbox.exec(job.test, timeout=job.limits.test_timeout_s)
        paths.test_log.write_text(f"$ {job.test}\n{test.output}\n[exit {test.exit_code}]\n", encoding="utf-8")
        outcome.test_exit_code = 124 if test.timed_out else test.exit_code


def _job_config(base: AgentConfig, job: BatchJob) -> AgentConfig:
    overrides = {}
    if job.limits.max_steps is not None:
        overrides["max_steps"] = job.limits.max_steps
    if job.limits.max_tokens is not None:
        overrides["token_budget"] = job.limits.max_tokens
    return base.model_copy(update=overrides, deep=True)
