"""Grade existing SWE-bench predictions (predictions.jsonl or .json: instance_id, model_name_or_path,
model_patch) instead of running an agent: the patch is handed to the grader as is, the way
swebench's run_evaluation takes it, so either harness can re-grade the other's predictions."""

from __future__ import annotations

import json
from pathlib import Path

from evals.agents.base import AgentContext, AgentOutcome

PREDICTION_FILE = "prediction.json"  # in the trial folder; evals/swebench/grader.py reads it


def load_predictions(path: Path) -> dict[str, dict]:
    text = Path(path).read_text(encoding="utf-8")
    if Path(path).suffix == ".json":
        data = json.loads(text)
        records = list(data.values()) if isinstance(data, dict) else data
    else:
        records = [json.loads(line) for line in text.splitlines() if line.strip()]
    out = {}
    for i, record in enumerate(records, 1):
        if not isinstance(record, dict) or "instance_id" not in record or "model_patch" not in record:
            raise ValueError(f"{path}: prediction {i}: expected an object with instance_id and model_patch")
        out[record["instance_id"]] = {"instance_id": record["instance_id"], "model_patch": record["model_patch"],
                                      "model_name_or_path": record.get("model_name_or_path") or "unknown"}
    return out


class PredictionsAgent:
    name = "predictions"

    def __init__(self, path: Path):
        self.path = Path(path)
        self.predictions = load_predictions(self.path)

    def run(self, ctx: AgentContext) -> AgentOutcome:
        prediction = self.predictions.get(ctx.task.id)
        if prediction is None:
            return AgentOutcome(finish_reason="error", error=f"no prediction for {ctx.task.id} in {self.path}")
        ctx.log_dir.mkdir(parents=True, exist_ok=True)
        (ctx.log_dir / PREDICTION_FILE).write_text(json.dumps(prediction), encoding="utf-8")
        return AgentOutcome(finish_reason="prediction")
