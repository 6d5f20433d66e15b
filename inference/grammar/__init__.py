"""Constrained decoding: grammar specs (engine API), their compilation and per-sequence matchers.

`spec.GrammarSpec` is what front-ends set on `SamplingParams.grammar`; `compiler.GrammarCompiler`
turns it into an xgrammar grammar for one vocabulary; `matcher.GrammarState` follows one
sequence, and `bitmask.fill_masks` / `apply_masks` constrain a batch of logits at once.
"""

from inference.grammar.spec import GrammarSpec, ToolSchema

__all__ = ["GrammarSpec", "ToolSchema"]
