"""`horizon eval validate`: a suite is valid when the oracle solves every task and nop solves none."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from evals.config import EvalConfig
from evals.results import ResultsLog, TrialResult
from evals.runner import RunOptions, run_eval


@dataclass
class ValidationReport:
    oracle: dict[str, TrialResult]
    nop: dict[str, TrialResult]
    problems: dict[str, list[str]] = field(default_factory=dict)

    @property
    def valid(self) -> bool:
        return not self.problems and bool(self.oracle)

    def render(self) -> str:
        lines = [f"{len(self.oracle)} tasks: oracle {sum(r.status == 'resolved' for r in self.oracle.values())} resolved, "
                 f"nop {sum(r.status == 'resolved' for r in self.nop.values())} resolved"]
        for task_id, problems in sorted(self.problems.items()):
            for problem in problems:
                lines.append(f"  INVALID {task_id}: {problem}")
        lines.append("suite is VALID (oracle 100%, nop 0%)" if self.valid else "suite is INVALID")
        return "\n".join(lines)


def _describe(r: TrialResult) -> str:
    if r.status == "error":
        return f"{r.error_class}: {r.error}"
    return r.error or r.status


def validate_suite(path: Path, out_dir: Path, jobs: int = 1, config: EvalConfig | None = None,
                   filters: list[str] | None = None, progress: bool = True) -> ValidationReport:
    by_agent: dict[str, dict[str, TrialResult]] = {}
    for agent in ("oracle", "nop"):
        options = RunOptions(agent=agent, jobs=jobs, out_dir=out_dir / agent, filters=filters or [],
                             progress=progress, resume=True)
        run_eval(path, options, config)
        results = ResultsLog(out_dir / agent / "results.jsonl").load()
        by_agent[agent] = {r.task_id: r for r in results if r.attempt == 0}
    report = ValidationReport(oracle=by_agent["oracle"], nop=by_agent["nop"])
    for task_id, r in report.oracle.items():
        if r.status != "resolved":
            report.problems.setdefault(task_id, []).append(f"oracle did not solve it ({_describe(r)})")
    for task_id, r in report.nop.items():
        if r.status == "resolved":
            report.problems.setdefault(task_id, []).append("nop solved it: the tests pass on the untouched environment")
        elif r.status == "error" and r.error_class != "task_invalid":
            report.problems.setdefault(task_id, []).append(f"nop run hit an infrastructure error ({_describe(r)})")
    return report
