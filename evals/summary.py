"""Aggregate trial results: resolved rate, pass@k, time, tokens, cache-hit rate, error classes."""

from __future__ import annotations

from collections import Counter, defaultdict
from math import comb

from pydantic import BaseModel, Field

from evals.results import TrialResult


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased estimator 1 - C(n-c, k) / C(n, k) (Chen et al.; Terminal-Bench uses the same)."""
    if n - c < k:
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)


class TaskSummary(BaseModel):
    task_id: str
    attempts: int
    resolved: int
    errors: int
    mean_seconds: float
    tokens: int


class Summary(BaseModel):
    agent: str
    tasks: int
    trials: int
    resolved_trials: int
    resolved_rate: float  # over trials that were not infrastructure errors
    pass_at_k: dict[str, float] = Field(default_factory=dict)
    infra_errors: int
    error_classes: dict[str, int] = Field(default_factory=dict)
    input_tokens: int
    output_tokens: int
    cached_tokens: int
    cache_hit_rate: float | None
    per_task: list[TaskSummary]
    # Images: how they were obtained over all trials (local/pulled/built/substituted), whether every
    # trial ran on the task's own images (False: some were substituted offline, the score is not
    # comparable to a leaderboard's), and each fallback that was taken (pull failed -> built...).
    image_sources: dict[str, int] = Field(default_factory=dict)
    comparable: bool = True
    image_fallbacks: list[str] = Field(default_factory=list)
    # One example message per infrastructure error class, so the console says what went wrong.
    error_examples: dict[str, str] = Field(default_factory=dict)


def summarize(results: list[TrialResult], agent: str) -> Summary:
    by_task: dict[str, list[TrialResult]] = defaultdict(list)
    for r in results:
        by_task[r.task_id].append(r)
    graded = [r for r in results if r.status != "error"]
    resolved = sum(r.status == "resolved" for r in graded)
    errors = Counter(r.error_class or "unknown" for r in results if r.status == "error")
    errors.update(f"agent:{r.error_class}" for r in graded if r.error_class)
    inp = sum(r.tokens.input for r in results)
    out = sum(r.tokens.output for r in results)
    cached = sum(r.tokens.cached for r in results)
    # pass@k over graded trials only: an infrastructure error says nothing about the agent.
    graded_by_task = {tid: [r for r in v if r.status != "error"] for tid, v in by_task.items()}
    pass_k = {}
    if max((len(v) for v in by_task.values()), default=0) > 1:
        for k in (1, 2, 4, 5, 8, 10):
            eligible = [v for v in graded_by_task.values() if len(v) >= k]
            if eligible:
                scores = [pass_at_k(len(v), sum(r.status == "resolved" for r in v), k) for v in eligible]
                pass_k[f"pass@{k}"] = sum(scores) / len(scores)
    per_task = [
        TaskSummary(
            task_id=tid,
            attempts=len(v),
            resolved=sum(r.status == "resolved" for r in v),
            errors=sum(r.status == "error" for r in v),
            mean_seconds=sum(r.seconds for r in v) / len(v),
            tokens=sum(r.tokens.input + r.tokens.output for r in v),
        )
        for tid, v in sorted(by_task.items())
    ]
    return Summary(
        agent=agent,
        tasks=len(by_task),
        trials=len(results),
        resolved_trials=resolved,
        resolved_rate=resolved / len(graded) if graded else 0.0,
        pass_at_k=pass_k,
        infra_errors=sum(errors[c] for c in errors if not c.startswith("agent:")),
        error_classes=dict(sorted(errors.items())),
        input_tokens=inp,
        output_tokens=out,
        cached_tokens=cached,
        cache_hit_rate=cached / inp if inp else None,
        per_task=per_task,
        image_sources=dict(sorted(Counter(i["source"] for r in results for i in r.images).items())),
        comparable=all(r.comparable for r in results),
        image_fallbacks=sorted({n for r in results for n in r.notes if _is_image_fallback(n)}),
        error_examples={c: next(f"{r.task_id}: {r.error}" for r in results if r.status == "error"
                                and (r.error_class or "unknown") == c) for c in sorted(errors) if not c.startswith("agent:")},
    )


def _is_image_fallback(note: str) -> bool:
    return "substituted" in note or "from the task's Dockerfile" in note


def render_table(summary: Summary) -> str:
    rows = [f"{'task':<40} {'resolved':>9} {'errors':>6} {'mean s':>8} {'tokens':>9}"]
    for t in summary.per_task:
        rows.append(f"{t.task_id[:40]:<40} {t.resolved:>4}/{t.attempts:<4} {t.errors:>6} {t.mean_seconds:>8.1f} {t.tokens:>9}")
    rows.append("")
    rows.append(f"agent {summary.agent}: resolved {summary.resolved_trials}/{summary.trials - summary.infra_errors} "
                f"trials ({summary.resolved_rate:.1%}) over {summary.tasks} tasks; infra errors {summary.infra_errors}")
    for k, v in summary.pass_at_k.items():
        rows.append(f"{k}: {v:.1%}")
    hit = "n/a" if summary.cache_hit_rate is None else f"{summary.cache_hit_rate:.1%}"
    rows.append(f"tokens: in {summary.input_tokens}, out {summary.output_tokens}, cached {summary.cached_tokens} (cache hit {hit})")
    if not summary.comparable:
        rows.append("NOT COMPARABLE to leaderboard scores: some trials ran on substituted base images "
                    "(--offline-substitute); see each row's `images`")
    for note in summary.image_fallbacks:
        rows.append(f"image fallback: {note}")
    if summary.error_classes:
        rows.append("error classes: " + ", ".join(f"{k}={v}" for k, v in summary.error_classes.items()))
    for cls, example in summary.error_examples.items():
        rows.append(f"  {cls}: {example[:400]}")
    return "\n".join(rows)
