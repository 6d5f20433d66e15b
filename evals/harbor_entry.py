"""What Horizon runs inside a Harbor task container (see evals/harbor_agent.py).

    python -m evals.harbor_entry --model openai:URL --instruction-file F --workdir /app \
        --trajectory /logs/agent/trajectory.jsonl --result /logs/agent/horizon-result.json

The container is the sandbox Harbor made for the trial, so the agent's tools act on it directly, in
the task's own folder (`InPlaceSandbox`: the local sandbox's persistent shell and file API, without
its private temporary workspace). Every event goes to the trajectory as it happens; the token usage
and finish reason go to the result file, which the Harbor agent reads back into its context.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import threading
from pathlib import Path

from sandbox.local import LocalSandbox


class InPlaceSandbox(LocalSandbox):
    """LocalSandbox working in the real `workdir` (not a copy): for a container someone else isolates."""

    def __init__(self, config=None, **overrides):
        super().__init__(config, **overrides)
        self.workdir = Path(self.config.workdir)  # _host_path maps the workdir onto itself from now on
        self.exec(f"cd {shlex.quote(str(self.workdir))}")


def run(model: str, instruction: str, workdir: str, trajectory: Path, time_limit_s: float | None,
        overrides: dict) -> dict:
    from agent.backends import EnginePool, make_backend
    from agent.config import AgentConfig
    from agent.events import RunStart
    from agent.instructions import build_system_prompt, load_project_instructions_from_sandbox
    from agent.loop import Agent
    from agent.tools.registry import build_toolset
    from agent.trajectory import TrajectoryWriter
    from sandbox import SandboxConfig

    settings = {**overrides, "model": model}
    if time_limit_s:
        settings["time_limit_s"] = time_limit_s
    config = AgentConfig.model_validate(settings)
    engines = EnginePool()
    sandbox = InPlaceSandbox(SandboxConfig(workdir=workdir))
    backend = make_backend(model, config, engines)
    tools, connections = build_toolset(config, sandbox, workdir=workdir)
    trajectory.parent.mkdir(parents=True, exist_ok=True)
    writer = TrajectoryWriter(trajectory)
    writer(RunStart(task=instruction, model=model, settings={"harness": "harbor", **config.model_dump(mode="json")}))
    system_prompt = build_system_prompt(config, load_project_instructions_from_sandbox(sandbox, workdir), workdir)
    agent = Agent(config, backend, tools, on_event=writer, system_prompt=system_prompt)
    stop = threading.Event()
    if time_limit_s:
        threading.Thread(target=lambda: stop.wait(time_limit_s) or agent.interrupt(), daemon=True).start()
    try:
        result = agent.run(instruction)
    finally:
        stop.set()
        writer.close()
        tools.close()
        for conn in connections:
            conn.close()
        backend.close()
        sandbox.close()
        engines.close()
    usage = result.usage
    return {"finish_reason": result.reason, "summary": result.summary, "input_tokens": usage.prompt_tokens,
            "output_tokens": usage.completion_tokens, "cached_tokens": usage.cached_tokens}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m evals.harbor_entry")
    p.add_argument("--model", required=True, help="embedded:PATH | openai:URL | replay:FILE")
    p.add_argument("--instruction-file", type=Path, required=True)
    p.add_argument("--workdir", required=True)
    p.add_argument("--trajectory", type=Path, required=True)
    p.add_argument("--result", type=Path, required=True)
    p.add_argument("--time-limit", type=float, default=None, help="seconds before the agent is interrupted")
    p.add_argument("--config-json", default="{}", help="AgentConfig overrides as a JSON object")
    args = p.parse_args(argv)
    outcome = run(args.model, args.instruction_file.read_text(encoding="utf-8"), args.workdir, args.trajectory,
                  args.time_limit, json.loads(args.config_json))
    args.result.write_text(json.dumps(outcome), encoding="utf-8")
    print(json.dumps(outcome))
    return 1 if outcome["finish_reason"] == "error" else 0


if __name__ == "__main__":
    sys.exit(main())
