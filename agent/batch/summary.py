"""The end-of-batch summary: counts by status, tokens, prompt-cache hit rate and time."""

from __future__ import annotations

import json
from collections import Counter

from pydantic import BaseModel

from agent.batch.jobs import JobLineError
from agent.batch.results import JobResult

STATUS_ORDER = ("fixed", "tests-failed", "no-change", "error")


class BatchSummary(BaseModel):
    jobs: int
    by_status: dict[str, int]
    invalid_lines: int
    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int
    cache_hit_rate: float
    job_time_s: float
    wall_time_s: float
    errors: dict[str, str]


def summarize(results: list[JobResult], invalid: list[JobLineError], wall_time_s: float) -> BatchSummary:
    counts = Counter(r.status for r in results)
    prompt = sum(r.prompt_tokens for r in results)
    cached = sum(r.cached_tokens for r in results)
    return BatchSummary(
        jobs=len(results),
        by_status={s: counts.get(s, 0) for s in STATUS_ORDER},
        invalid_lines=len(invalid),
        prompt_tokens=prompt,
        cached_tokens=cached,
        completion_tokens=sum(r.completion_tokens for r in results),
        cache_hit_rate=round(cached / prompt, 4) if prompt else 0.0,
        job_time_s=round(sum(r.duration_s for r in results), 2),
        wall_time_s=round(wall_time_s, 2),
        errors={r.id: r.reason or "" for r in results if r.status == "error"},
    )


def render(summary: BatchSummary) -> str:
    counts = ", ".join(f"{n} {status}" for status, n in summary.by_status.items())
    lines = [
        f"{summary.jobs} jobs: {counts}" + (f"; {summary.invalid_lines} invalid lines" if summary.invalid_lines else ""),
        f"tokens: {summary.prompt_tokens} in ({summary.cache_hit_rate:.0%} cached), {summary.completion_tokens} out",
        f"time: {summary.wall_time_s:.1f}s wall, {summary.job_time_s:.1f}s summed over jobs",
    ]
    lines += [f"  error {job_id}: {reason}" for job_id, reason in summary.errors.items()]
    return "\n".join(lines)


def dump(summary: BatchSummary) -> str:
    return json.dumps(summary.model_dump(), indent=2) + "\n"
