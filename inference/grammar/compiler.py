"""GrammarSpec -> compiled xgrammar grammar for one vocabulary (cached per spec).

xgrammar was chosen over llguidance by measured mask cost on our vocabularies (README,
benchmarks/structured_outputs.py --libraries) and because it ships the GLM-5 tool-call grammar
(`get_model_structural_tag("glm_4_7")`, arguments in the `glm_xml` style), the one SGLang and vLLM
use, so a forced call is written exactly as `inference/chat/tool_args.py` parses it.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import OrderedDict
from typing import Any, Optional

from inference.grammar.schema_fixes import json_safe_schema
from inference.grammar.spec import GrammarSpec

THINK_END = "</think>"
# Inside reasoning no GLM control marker may appear (what xgrammar's GLM tag excludes too).
_REASONING_EXCLUDES = ["<think>", "</think>", "<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>",
                       "<arg_value>", "</arg_value>"]


# At most this many whitespace characters in a row between JSON / GLM argument tokens (never
# inside string values): real output needs one or two (a newline and an indent), and without a
# cap a weak or confused model can spend its whole budget on whitespace.
MAX_WHITESPACE = 2


class GrammarError(ValueError):
    """A spec that cannot be compiled (e.g. an invalid JSON schema); the message says why."""


class GrammarCompiler:
    """Compiles specs for a vocabulary given as raw bytes per token id (special tokens as their text).

    `vocab_size` is the model's logits width (it may exceed the tokenizer's); `stop_token_ids`
    end a constrained reply once its grammar is complete.
    """

    def __init__(self, token_bytes: list[bytes], vocab_size: int, stop_token_ids: list[int],
                 max_threads: int = 4, cache_size: int = 256):
        import xgrammar as xgr

        self.vocab_size = vocab_size
        padded = list(token_bytes) + [b""] * max(0, vocab_size - len(token_bytes))
        self.info = xgr.TokenizerInfo(padded[:vocab_size], xgr.VocabType.RAW, vocab_size=vocab_size,
                                      stop_token_ids=list(stop_token_ids))
        threads = max(1, min(max_threads, os.cpu_count() or 1))
        self._compiler = xgr.GrammarCompiler(self.info, max_threads=threads, cache_enabled=True)
        self._cache: OrderedDict[str, Any] = OrderedDict()
        self._cache_size = cache_size
        self._lock = threading.Lock()
        self.compile_seconds = 0.0  # total time spent compiling (cache misses)

    @classmethod
    def for_tokenizer(cls, tokenizer, vocab_size: Optional[int] = None, **kwargs) -> GrammarCompiler:
        table = tokenizer.token_bytes
        if table is None:
            table = [tokenizer.decode([i]).encode("utf-8") for i in range(tokenizer.vocab_size)]
        return cls(table, vocab_size or tokenizer.vocab_size, tokenizer.stop_token_ids, **kwargs)

    def compile(self, spec: GrammarSpec):
        """The compiled grammar (xgrammar.CompiledGrammar) for spec; raises GrammarError."""
        key = spec.cache_key()
        with self._lock:
            if key in self._cache:
                self._cache.move_to_end(key)
                return self._cache[key]
        start = time.perf_counter()
        try:
            try:
                compiled = self._compiler.compile_structural_tag(structural_tag(spec))
            except Exception:
                if spec.kind != "tool_call":
                    raise
                # A vocabulary without the GLM marker tokens: match the markers as text instead.
                compiled = self._compiler.compile_structural_tag(structural_tag(spec, token_markers=False))
        except Exception as exc:  # xgrammar raises RuntimeError/ValueError subclasses for bad schemas
            raise GrammarError(_describe(spec, exc)) from None
        with self._lock:
            self.compile_seconds += time.perf_counter() - start
            self._cache[key] = compiled
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return compiled


def structural_tag(spec: GrammarSpec, token_markers: bool = True):
    """The xgrammar StructuralTag for a spec. `token_markers`: GLM's `<tool_call>`, `<arg_key>`...
    must be their special tokens (what the model was trained on), not spelled out in text."""
    from xgrammar import StructuralTag, get_model_structural_tag
    from xgrammar.structural_tag import AnyTextFormat, JSONSchemaFormat, SequenceFormat, TagFormat

    if spec.kind == "tool_call":
        tools = [{"type": "function", "function": {"name": t.name, "parameters": json_safe_schema(t.parameters, True)}}
                 for t in spec.tools]
        choice: Any = "required" if spec.tool_choice == "required" else {
            "type": "function", "function": {"name": spec.tool_choice}}
        return get_model_structural_tag("glm_4_7", tools=tools, tool_choice=choice,
                                        reasoning="enabled" if spec.reasoning else "disabled",
                                        parallel_tool_calls=spec.parallel_tool_calls, max_whitespace_cnt=MAX_WHITESPACE,
                                        token_markers=token_markers)
    schema = json_safe_schema(spec.json_schema) if spec.kind == "json_schema" else {"type": "object"}
    # GLM control markers never belong in JSON text (they would also read as markup).
    body = JSONSchemaFormat(json_schema=schema, excludes=_REASONING_EXCLUDES, max_whitespace_cnt=MAX_WHITESPACE)
    if not spec.reasoning:
        return StructuralTag(format=body)
    thinking = TagFormat(begin="", content=AnyTextFormat(excludes=_REASONING_EXCLUDES), end=THINK_END)
    return StructuralTag(format=SequenceFormat(elements=[thinking, body]))


def _describe(spec: GrammarSpec, exc: Exception) -> str:
    what = {"json_schema": "json_schema: the schema", "json_object": "json_object",
            "tool_call": "tools: the tools' parameter schemas"}[spec.kind]
    detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    shown = json.dumps(spec.json_schema)[:120] if spec.kind == "json_schema" else ""
    return f"{what} cannot be compiled into a grammar: {detail}" + (f" (got {shown})" if shown else "")
