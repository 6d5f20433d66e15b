"""The batch: a pool of `-j N` workers over the jobs, results appended as each job ends.

Stopping (Ctrl-C, SIGTERM) interrupts the running jobs and records none of them, so `--resume`
reruns exactly the jobs that had not finished.
"""

from __future__ import annotations

import dataclasses
import sys
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import TextIO

from agent.backends import EnginePool
from agent.batch.branches import BranchError, commit_patch_to_branch
from agent.batch.execute import JobAborted, JobHandle, JobSettings, run_job
from agent.batch.jobs import BatchJob, JobLineError
from agent.batch.layout import BatchLayout
from agent.batch.progress import Progress
from agent.batch.results import JobResult, ResultsLog
from agent.batch.summary import BatchSummary, dump, render, summarize


class BatchRunner:
    def __init__(
        self,
        jobs: list[BatchJob],
        invalid: list[JobLineError],
        settings: JobSettings,
        out_dir: Path,
        *,
        concurrency: int = 1,
        resume: bool = False,
        branch_prefix: str | None = None,
        stream: TextIO | None = None,
    ):
        self.layout = BatchLayout(Path(out_dir))
        self.layout.root.mkdir(parents=True, exist_ok=True)
        self.log = ResultsLog(self.layout.results)
        if not resume and self.log.read():
            raise FileExistsError(f"{self.layout.results} already has results: pass --resume or another --out")
        done = self.log.finished_ids() if resume else set()
        self.skipped = [job.id for job in jobs if job.id in done]
        self.jobs = [job for job in jobs if job.id not in done]
        self.invalid = invalid
        self.engines = EnginePool()  # one model load for all `embedded:` jobs; closed when run() ends
        self.settings = dataclasses.replace(settings, engines=self.engines)
        self.concurrency = max(1, concurrency)
        self.branch_prefix = branch_prefix
        self.stream = stream
        self.progress = Progress(0, stream)
        self.handles: dict[str, JobHandle] = {}
        self._stopping = threading.Event()

    def run(self) -> BatchSummary:
        started = time.monotonic()
        self.layout.invalid_jobs.write_text(
            "[\n" + ",\n".join(e.model_dump_json() for e in self.invalid) + "\n]\n", encoding="utf-8"
        )
        for error in self.invalid:
            self._say(f"invalid job: {error}")
        if self.skipped:
            self._say(f"resume: skipping {len(self.skipped)} finished jobs")
        self._say(f"running {len(self.jobs)} jobs, {self.concurrency} at a time -> {self.layout.root}")
        self.progress = Progress(len(self.jobs), self.stream)
        with self.engines, self.progress, ThreadPoolExecutor(self.concurrency, thread_name_prefix="horizon-job") as pool:
            pending: set[Future] = {pool.submit(self._one, job) for job in self.jobs}
            try:
                while pending:
                    _, pending = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
            except KeyboardInterrupt:
                self.stop()
                for future in pending:
                    future.cancel()
                raise
        summary = summarize(self.log.read(), self.invalid, time.monotonic() - started)
        self.layout.summary.write_text(dump(summary), encoding="utf-8")
        self._say(render(summary))
        return summary

    def stop(self) -> None:
        """Interrupt every running job; none of them is recorded."""
        self._stopping.set()
        for handle in list(self.handles.values()):
            handle.stop(timeout=False)

    def _one(self, job: BatchJob) -> JobResult | None:
        if self._stopping.is_set():
            return None
        handle = self.handles[job.id] = JobHandle(job.id)
        self.progress.started(job.id)
        try:
            result = run_job(job, self.settings, self.layout.job(job.id), handle)
        except JobAborted:
            self.progress.dropped(job.id, f"stopped {job.id} (not recorded; --resume reruns it)")
            return None
        finally:
            self.handles.pop(job.id, None)
        if self.branch_prefix and result.status == "fixed":
            if job.is_local:
                result = self._commit_branch(job, result)
            else:  # a remote repository is never pushed to: the patch is the deliverable
                result = result.model_copy(update={"warnings": [*result.warnings, (
                    f"no branch {self.branch_prefix}{job.id}: --branch-prefix commits only to local "
                    f"repositories, and {job.repo} is a URL; apply {job.id}/patch.diff instead")]})
        self.layout.job(job.id).result.write_text(result.model_dump_json(indent=2), encoding="utf-8")
        self.log.append(result)
        self.progress.finished(job.id, result.status, result.reason, result.duration_s)
        return result

    def _commit_branch(self, job: BatchJob, result: JobResult) -> JobResult:
        patch = self.layout.job(job.id).patch.read_text(encoding="utf-8")
        branch = f"{self.branch_prefix}{job.id}"
        try:
            commit_patch_to_branch(Path(job.repo), result.base_commit, branch, patch, f"{job.id}: fix by horizon batch")
        except BranchError as exc:
            return result.model_copy(update={"reason": f"fixed, but committing the branch failed: {exc}"})
        return result.model_copy(update={"branch": branch})

    def _say(self, line: str) -> None:
        print(line, file=self.stream or sys.stderr, flush=True)

