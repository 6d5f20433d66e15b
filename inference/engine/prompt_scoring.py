"""Logprobs of a prompt's own tokens (OpenAI `/v1/completions` with `echo` and `logprobs`).

A separate prefill on temporary pages, chunked like any prefill, with logits for every row: the
prompt's tokens are scored given their prefix, the first (which has none) gets None. It runs under
the engine's step lock, between two steps, and does not touch the prefix cache's pages.
"""

from __future__ import annotations

from typing import Optional

import torch

from inference.engine.request import EngineError, TokenLogprob
from inference.engine.runner_commands import TargetStep


@torch.inference_mode()
def score_prompt(engine, prompt_ids: list[int], top_n: int) -> list[Optional[TokenLogprob]]:
    engine._validate_prompt(prompt_ids)
    ps, chunk = engine.config.page_size, max(1, engine.config.chunk_size)
    need = -(-len(prompt_ids) // ps)
    out: list[Optional[TokenLogprob]] = [None]
    with engine._step_lock:
        if not engine.prefix_cache.make_room(need):
            raise EngineError("prompt", f"{need} KV pages are needed to score the prompt and running requests "
                              "hold the rest; retry later")
        pages = engine.allocator.alloc(need)
        try:
            for start in range(0, len(prompt_ids) - 1, chunk):
                ids = prompt_ids[start:start + chunk]
                # Through the runner's command, so tensor-parallel followers run the same forward.
                step = TargetStep([ids], [start], [pages], list(range(len(ids))), want_hidden=False)
                logits = engine.runner.execute(step).logits.float()
                targets = prompt_ids[start + 1:start + 1 + len(ids)]
                lp = torch.log_softmax(logits[: len(targets)], dim=-1)
                chosen = lp.gather(1, torch.tensor(targets, device=lp.device)[:, None])[:, 0].tolist()
                top_v, top_i = lp.topk(max(1, top_n), dim=-1)
                top_v, top_i = top_v[:, :top_n].tolist(), top_i[:, :top_n].tolist()
                out += [TokenLogprob(token_id=t, logprob=c, top=list(zip(ti, tv)))
                        for t, c, ti, tv in zip(targets, chosen, top_i, top_v)]
        finally:
            engine.allocator.free(pages)
    return out
