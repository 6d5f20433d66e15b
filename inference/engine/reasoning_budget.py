"""Thinking-token budgets per reasoning effort.

The chat template decides whether the prompt opens `<think>`; the engine enforces the budget:
once a request has spent its thinking tokens inside `<think>` the next token is forced to be
`</think>` (and the answer continues), and a request whose budget is spent (always, for `none`)
may not open `<think>` again.
"""

from __future__ import annotations

from typing import Optional


class ReasoningState:
    def __init__(self, budget: Optional[int], think_start_id: int, think_end_id: int, prompt_ids: list[int]):
        self.budget = budget
        self.start_id = think_start_id
        self.end_id = think_end_id
        self.spent = 0
        last_start = max((i for i, t in enumerate(prompt_ids) if t == think_start_id), default=-1)
        last_end = max((i for i, t in enumerate(prompt_ids) if t == think_end_id), default=-1)
        self.in_think = last_start > last_end

    @property
    def exhausted(self) -> bool:
        return self.budget is not None and self.spent >= self.budget

    def forced_token(self) -> Optional[int]:
        return self.end_id if self.in_think and self.exhausted else None

    def banned_token(self) -> Optional[int]:
        return self.start_id if not self.in_think and self.exhausted else None

    def advance(self, token_id: int) -> None:
        if token_id == self.start_id:
            self.in_think = True
        elif token_id == self.end_id:
            self.in_think = False
        elif self.in_think:
            self.spent += 1


def make_reasoning_state(effort: Optional[str], budgets: dict[str, Optional[int]],
                         think_start_id: Optional[int], think_end_id: Optional[int],
                         prompt_ids: list[int], budget: Optional[int] = None) -> Optional[ReasoningState]:
    """`budget` (tokens) overrides the effort level's budget when given."""
    if (effort is None and budget is None) or think_start_id is None or think_end_id is None:
        return None
    return ReasoningState(budgets.get(effort) if budget is None else budget, think_start_id, think_end_id, prompt_ids)
