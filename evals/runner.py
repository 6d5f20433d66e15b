"""Run an agent over a task suite: parallel trials, infrastructure retries, resumable results.

    summary = run_eval(Path("evals/tasks"), RunOptions(agent="oracle", jobs=4, out_dir=Path("out")))

Results are appended to OUT/results.jsonl as each trial ends; with `resume`, trials already there
are skipped. Infrastructure errors (build, sandbox, verifier) are retried up to the config's limit
and are reported apart from agent failures. At the end OUT/summary.json and, for SWE-style tasks,
OUT/predictions.jsonl (SWE-bench format) are written.
"""

from __future__ import annotations

import fnmatch
import logging
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from pydantic import BaseModel, Field

from evals.adapters import load_tasks
from evals.agents.base import EvalAgent
from evals.config import EvalConfig
from evals.images import ImageBuilder, ImageMap
from evals.progress import Progress
from evals.results import RETRYABLE, ResultsLog, TrialResult, write_predictions
from evals.summary import Summary, render_table, summarize
from evals.task import Task, TaskLoadError
from evals.trial import Engine, Trial
from sandbox.docker_client import connect

log = logging.getLogger("evals.runner")


class RunOptions(BaseModel):
    agent: str = "oracle"
    model: str | None = None
    jobs: int = Field(1, ge=1, le=256)
    out_dir: Path = Path("eval-out")
    attempts: int = Field(1, ge=1, le=100)
    timeout_multiplier: float = Field(1.0, gt=0)
    filters: list[str] = Field(default_factory=list)
    resume: bool = False
    progress: bool = True
    predictions: Path | None = None  # --agent predictions: SWE-bench predictions to grade


class ResultsExist(RuntimeError):
    pass


def make_agent(options: RunOptions, config: EvalConfig) -> EvalAgent:
    if options.agent == "oracle":
        from evals.agents.oracle import OracleAgent

        return OracleAgent()
    if options.agent == "nop":
        from evals.agents.nop import NopAgent

        return NopAgent()
    if options.agent == "horizon":
        from evals.agents.horizon import HorizonAgent

        if not options.model:
            raise ValueError("--agent horizon needs --model SPEC (e.g. replay:FILE, openai:URL, embedded:PATH)")
        return HorizonAgent(options.model, config.agent)
    if options.agent == "predictions":
        from evals.agents.predictions import PredictionsAgent

        if options.predictions is None:
            raise ValueError("--agent predictions needs --predictions FILE (SWE-bench predictions.jsonl)")
        return PredictionsAgent(options.predictions)
    raise ValueError(f"unknown agent {options.agent!r}: expected horizon, oracle, nop or predictions")


def make_engines(config: EvalConfig) -> list[Engine]:
    image_map = ImageMap.with_overrides(config.images)
    engines = []
    for e in config.engines:
        client = connect(e.docker_host)
        engines.append(Engine(name=e.name, docker_host=e.docker_host, client=client, builder=ImageBuilder(client, image_map, config.image_policy)))
    return engines


def _selected(items, filters: list[str]):
    return [t for t in items if not filters or any(fnmatch.fnmatchcase(t.id, f) for f in filters)]


def _invalid_result(err: TaskLoadError, agent: str) -> TrialResult:
    now = time.time()
    return TrialResult(task_id=err.id, format="unknown", agent=agent, attempt=0, status="error",
                       error_class="task_invalid", error=str(err), started_at=now, finished_at=now,
                       details={"file": err.file, "field": err.field, "message": err.message, "source": str(err.source)})


def with_network_override(task: Task, mode: str) -> Task:
    """`--network public|no-network`: the agent phase's network for every task (and a shared
    verifier's, which runs in the same container); "task" keeps each task's own."""
    if mode == "task":
        return task
    on = mode == "public"
    update: dict = {"network": on, "allowed_hosts": []}
    if getattr(task.verifier, "environment_mode", None) == "shared":
        update["verifier"] = task.verifier.model_copy(update={"network": on, "allowed_hosts": []})
    return task.model_copy(update=update)


def _run_with_retries(task: Task, agent: EvalAgent, engine: Engine, out_dir: Path, attempt: int,
                      options: RunOptions, retries: int, run_label: str,
                      stopping: threading.Event | None = None) -> TrialResult:
    result = None
    for retry in range(retries + 1):
        trial_dir = out_dir / "trials" / task.id / (f"attempt-{attempt}" + ("" if retry == 0 else f"-retry-{retry}"))
        result = Trial(task, agent, engine, trial_dir, attempt, options.timeout_multiplier, run_label).run()
        result = result.model_copy(update={"retries": retry})
        (trial_dir / "result.json").write_text(result.model_dump_json(indent=2), encoding="utf-8")
        if result.status != "error" or result.error_class not in RETRYABLE:
            break
        if stopping is not None and stopping.is_set():
            break  # interrupted: a retry would start a container the exiting process cannot clean up
        log.warning("%s attempt %d: %s (%s); retrying", task.id, attempt, result.error_class, result.error)
    return result


def run_eval(path: Path, options: RunOptions, config: EvalConfig | None = None,
             agent: EvalAgent | None = None) -> Summary:
    config = config or EvalConfig()
    if agent is not None:  # the caller's agent: the caller closes it
        return _run_eval(path, options, config, agent)
    agent = make_agent(options, config)  # a bad --agent/--model fails before anything is written
    try:
        return _run_eval(path, options, config, agent)
    finally:
        close = getattr(agent, "close", None)  # the horizon agent holds loaded engines until closed
        if close is not None:
            close()


def _run_eval(path: Path, options: RunOptions, config: EvalConfig, agent: EvalAgent) -> Summary:
    out = Path(options.out_dir)
    results = ResultsLog(out / "results.jsonl")
    previous = [r for r in results.load() if r.agent == options.agent]
    if previous and not options.resume:
        raise ResultsExist(f"{results.path} already holds results: pass --resume to continue, or use another --out")
    done = {r.key for r in previous}
    every = load_tasks(path, config.base_image, swebench_config(config))
    loaded = _selected(every, options.filters)
    if options.filters and not loaded:
        # A mistyped --filter must not look like an empty, successful run.
        raise ValueError(f"--filter {' '.join(options.filters)!s} matched none of the {len(every)} task ids in {path}")
    for err in (t for t in loaded if isinstance(t, TaskLoadError)):
        if (err.id, 0) not in done:
            results.append(_invalid_result(err, options.agent))
            log.error("invalid task %s", err)
    tasks = [with_network_override(t, config.network) for t in loaded if isinstance(t, Task)]
    pending = [(t, a) for t in tasks for a in range(options.attempts) if (t.id, a) not in done]
    engines = make_engines(config)
    run_label = f"{options.agent}-{uuid.uuid4().hex[:8]}"
    progress = Progress(len(pending), enabled=options.progress)
    stopping = threading.Event()
    with ThreadPoolExecutor(max_workers=options.jobs, thread_name_prefix="eval") as pool:
        futures = {}
        for i, (task, attempt) in enumerate(pending):
            label = f"{task.id}#{attempt}"
            engine = engines[i % len(engines)]

            def job(task=task, attempt=attempt, engine=engine, label=label):
                if stopping.is_set():
                    return None
                progress.started(label)
                result = _run_with_retries(task, agent, engine, out, attempt, options, config.max_infra_retries,
                                           run_label, stopping)
                if stopping.is_set() and result.status == "error" and result.error_class in RETRYABLE:
                    return result  # most likely our own shutdown closed its sandbox: left unrecorded for --resume
                results.append(result)
                progress.finished(label, result)
                return result

            futures[pool.submit(job)] = label
        try:
            for future in as_completed(futures):
                future.result()
        except KeyboardInterrupt:
            # Trials already running finish and are recorded; queued ones are dropped (--resume runs them).
            print("\ninterrupted: finishing the running trials (Ctrl-C again to abort)", file=sys.stderr)
            stopping.set()
            pool.shutdown(wait=False, cancel_futures=True)
            raise
    progress.close()
    return finish(out, options.agent)


def finish(out: Path, agent: str) -> Summary:
    """Summarize everything recorded for `agent` in OUT (including resumed runs)."""
    all_results = [r for r in ResultsLog(out / "results.jsonl").load() if r.agent == agent]
    summary = summarize(all_results, agent)
    (out / "summary.json").write_text(summary.model_dump_json(indent=2), encoding="utf-8")
    predictions, trial_dirs = {}, {}
    for r in sorted(all_results, key=lambda r: r.attempt):
        if r.format == "swe" and "model_patch" in r.details and r.task_id not in predictions:
            predictions[r.task_id] = {"instance_id": r.task_id,
                                      "model_name_or_path": r.details.get("model_name_or_path") or agent,
                                      "model_patch": r.details["model_patch"]}
            trial_dirs[r.task_id] = out / "trials" / r.task_id / (
                f"attempt-{r.attempt}" + (f"-retry-{r.retries}" if r.retries else ""))
    if predictions:
        write_predictions(out / "predictions.jsonl", list(predictions.values()))
        from evals.swebench.report import write_run_report

        write_run_report(out, f"horizon-{agent}", predictions, trial_dirs)
    return summary


def swebench_config(config: EvalConfig):
    """[swebench], with the run-wide image settings applied where they were given (`--pull`,
    `--offline-substitute`, the same keys at the config's top level, or the substitute's env
    switch), so one switch governs every format; a default leaves [swebench]'s own setting."""
    update = {}
    given = config.model_fields_set
    if "offline_substitute" in given or config.offline_substitute:
        update["offline_substitute"] = config.offline_substitute
    if "pull" in given:
        update["pull"] = config.pull
    return config.swebench.model_copy(update=update) if update else config.swebench


__all__ = ["RunOptions", "ResultsExist", "run_eval", "finish", "render_table", "make_agent"]
