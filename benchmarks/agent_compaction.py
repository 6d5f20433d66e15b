#!/usr/bin/env python3
"""Prefix-cache cost of long-horizon context management: Horizon's staged compaction vs a sliding window.

A scripted agent run (replay backend, one large observation per turn) is driven through the real
`agent.loop.Agent` twice, with the same context window:
- staged:  agent.context.ContextManager — stable prefix, elide old observations in large steps,
           summarize the middle only when eliding is not enough;
- sliding: the common baseline — when over the window, drop the oldest turns until it fits, which
           shifts the conversation (and breaks the prefix cache) on almost every turn once full.

The replay backend counts a prompt's cached tokens as the part identical to the previous prompt
plus reply, which is what a prefix cache can serve. Recomputed tokens = prompt - cached: the
prefill work each strategy costs. The last line is JSON with the ratio sliding / staged.

    python benchmarks/agent_compaction.py            # 300 turns
    python benchmarks/agent_compaction.py --quick    # 80 turns, small window
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pydantic import BaseModel  # noqa: E402

from agent.backends.replay import ReplayBackend  # noqa: E402
from agent.config import AgentConfig, ContextConfig  # noqa: E402
from agent.context import Compaction, ContextManager  # noqa: E402
from agent.events import Compacted, UsageEvent  # noqa: E402
from agent.loop import Agent  # noqa: E402
from agent.tools import ToolContext, ToolSet, function_tool  # noqa: E402
from agent.tools.builtins import FinishTool  # noqa: E402


class ReadArgs(BaseModel):
    n: int


@function_tool(read_only=True)
def read_chunk(args: ReadArgs, ctx: ToolContext) -> str:
    """Read one chunk of a long log."""
    return "\n".join(f"chunk {args.n} line {i}: " + "y" * 48 for i in range(40))


class SlidingWindow(ContextManager):
    """Baseline: drop the oldest turns after the task until the conversation fits the trigger."""

    def maybe_compact(self, messages, last_context_tokens, backend, force=False):
        cfg = self.config
        limit = cfg.compact_trigger * cfg.context_window
        before = max(self.estimate_tokens(messages), last_context_tokens)
        if before < limit and not force:
            return None
        kept = list(messages)
        while self._estimate_fresh(kept) >= limit:
            turns = [i for i, m in enumerate(kept) if m.role == "assistant"]
            if len(turns) < 2:
                break
            del kept[turns[0] : turns[1]]  # the oldest whole turn (call + its results)
        return self._done(kept, "elide", before, self._estimate_fresh(kept), [])


def run(strategy: str, turns: int, window: int, workdir: Path) -> dict:
    steps = [{"tool_calls": [{"id": f"c{n}", "name": "read_chunk", "arguments": {"n": n}}]} for n in range(turns)]
    steps.append({"tool_calls": [{"id": "done", "name": "finish", "arguments": {"summary": "read all"}}]})
    steps += [{"purpose": "summary", "content": f"Summary {k}: chunks read in order, nothing unusual."}
              for k in range(turns)]
    script = workdir / f"{strategy}.jsonl"
    script.write_text("".join(json.dumps(s) + "\n" for s in steps))
    context = ContextConfig(context_window=window, compact_trigger=0.8, compact_target=0.5,
                            keep_first_turns=2, keep_recent_turns=8)
    ctx = ToolContext(sandbox=None)
    events: list = []
    agent = Agent(AgentConfig(max_steps=turns + 5, context=context), ReplayBackend(script),
                  ToolSet([read_chunk(ctx), FinishTool(ctx)]), on_event=events.append)
    if strategy == "sliding":
        agent.context = SlidingWindow(context)
    result = agent.run("Read the whole log.")
    usages = [e for e in events if isinstance(e, UsageEvent)]
    breaks = sum(1 for a, b in zip(usages, usages[1:]) if b.cached_tokens < a.context_tokens)
    prompt = sum(u.prompt_tokens for u in usages)
    cached = sum(u.cached_tokens for u in usages)
    return {
        "strategy": strategy, "finished": result.reason, "turns": len(usages),
        "compactions": sum(isinstance(e, Compacted) for e in events), "prefix_breaks": breaks,
        "prompt_tokens": prompt, "cached_tokens": cached, "recomputed_tokens": prompt - cached,
        "hit_rate": round(cached / prompt, 4), "max_context": max(u.context_tokens for u in usages),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--window", type=int, default=40_000, help="context window in tokens")
    parser.add_argument("--quick", action="store_true", help="80 turns in a 16k window (for tests)")
    args = parser.parse_args()
    turns, window = (80, 16_000) if args.quick else (args.turns, args.window)
    with tempfile.TemporaryDirectory() as tmp:
        results = [run(s, turns, window, Path(tmp)) for s in ("staged", "sliding")]
    for r in results:
        print(f"{r['strategy']:8s} turns={r['turns']} compactions={r['compactions']} breaks={r['prefix_breaks']} "
              f"prompt={r['prompt_tokens']} cached={r['cached_tokens']} recomputed={r['recomputed_tokens']} "
              f"hit_rate={r['hit_rate']:.3f} max_context={r['max_context']}")
    staged, sliding = results
    ratio = sliding["recomputed_tokens"] / max(staged["recomputed_tokens"], 1)
    print(f"sliding window recomputes {ratio:.1f}x the prompt tokens of staged compaction")
    print(json.dumps({"benchmark": "agent_compaction", "turns": turns, "window": window, "staged": staged,
                      "sliding": sliding, "recompute_ratio": round(ratio, 2)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
