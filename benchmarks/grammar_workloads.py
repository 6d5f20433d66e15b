"""Workloads for benchmarks/structured_outputs.py: schemas, documents, 20 agent tools, the
per-token mask cost of xgrammar and llguidance, and a large BPE vocabulary trained offline."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

NESTED_SCHEMA = {"type": "object", "properties": {
    "path": {"type": "string"}, "line": {"type": "integer"}, "mode": {"enum": ["read", "write", "append"]},
    "tags": {"type": "array", "items": {"type": "string"}},
    "opts": {"type": "object", "properties": {"force": {"type": "boolean"}, "depth": {"type": "number"}},
             "required": ["force"], "additionalProperties": False}},
    "required": ["path", "line", "mode", "tags", "opts"], "additionalProperties": False}

JSON_DOCS = [json.dumps({"path": f"/src/pkg{i}/module_{i}.py", "line": i * 37, "mode": ["read", "write", "append"][i % 3],
                         "tags": [f"tag{j}" for j in range(i % 4)], "opts": {"force": i % 2 == 0, "depth": i / 7}},
                        indent=None if i % 2 else 2) for i in range(20)]

_TOOL_SHAPES = [
    ("bash", {"command": {"type": "string"}, "timeout_s": {"type": "integer", "minimum": 1, "maximum": 3600}}, ["command"]),
    ("read_file", {"path": {"type": "string"}, "start_line": {"type": "integer"}, "end_line": {"type": "integer"}}, ["path"]),
    ("write_file", {"path": {"type": "string"}, "content": {"type": "string"}}, ["path", "content"]),
    ("edit_file", {"path": {"type": "string"}, "old": {"type": "string"}, "new": {"type": "string"},
                   "replace_all": {"type": "boolean"}}, ["path", "old", "new"]),
    ("grep", {"pattern": {"type": "string"}, "path": {"type": "string"}, "ignore_case": {"type": "boolean"},
              "max_results": {"type": "integer", "minimum": 1}}, ["pattern"]),
    ("glob", {"pattern": {"type": "string"}, "root": {"type": "string"}}, ["pattern"]),
    ("list_dir", {"path": {"type": "string"}, "depth": {"type": "integer", "minimum": 0, "maximum": 5}}, ["path"]),
    ("apply_patch", {"patch": {"type": "string"}}, ["patch"]),
    ("run_tests", {"paths": {"type": "array", "items": {"type": "string"}}, "keyword": {"type": "string"},
                   "fail_fast": {"type": "boolean"}}, []),
    ("git", {"subcommand": {"enum": ["status", "diff", "log", "show", "blame"]},
             "args": {"type": "array", "items": {"type": "string"}}}, ["subcommand"]),
    ("search_symbols", {"query": {"type": "string"}, "kind": {"enum": ["function", "class", "variable", "any"]}}, ["query"]),
    ("find_references", {"symbol": {"type": "string"}, "path": {"type": "string"}}, ["symbol"]),
    ("todo", {"items": {"type": "array", "items": {"type": "object", "properties": {
        "text": {"type": "string"}, "done": {"type": "boolean"}}, "required": ["text", "done"]}}}, ["items"]),
    ("web_fetch", {"url": {"type": "string"}, "max_bytes": {"type": "integer", "minimum": 1}}, ["url"]),
    ("python", {"code": {"type": "string"}, "timeout_s": {"type": "number"}}, ["code"]),
    ("ask_user", {"question": {"type": "string"}, "choices": {"type": "array", "items": {"type": "string"}}}, ["question"]),
    ("move_file", {"src": {"type": "string"}, "dst": {"type": "string"}, "overwrite": {"type": "boolean"}}, ["src", "dst"]),
    ("delete_file", {"path": {"type": "string"}, "recursive": {"type": "boolean"}}, ["path"]),
    ("http_request", {"method": {"enum": ["GET", "POST", "PUT", "DELETE"]}, "url": {"type": "string"},
                      "headers": {"type": "object", "additionalProperties": {"type": "string"}},
                      "body": {"type": "string"}}, ["method", "url"]),
    ("finish", {"summary": {"type": "string"}, "success": {"type": "boolean"}}, ["summary", "success"]),
]


def agent_tools(n: int) -> list[dict]:
    """n coding-agent tools (name + JSON-schema parameters), the shape agents send."""
    return [{"name": name, "parameters": {"type": "object", "properties": props, "required": req}}
            for name, props, req in _TOOL_SHAPES[:n]]


def mask_cost(tokenizer_json: Path, docs: list[str]) -> dict:
    """Mean microseconds per token mask while each library follows `docs` token by token."""
    import llguidance as llg
    import llguidance.torch as llg_torch
    import xgrammar as xgr

    from inference.tokenizer import Tokenizer

    tok = Tokenizer.from_pretrained(tokenizer_json.parent)
    vocab, stops, schema = tok.vocab_size, tok.stop_token_ids, json.dumps(NESTED_SCHEMA)
    start = time.perf_counter()
    info = xgr.TokenizerInfo(tok.token_bytes, xgr.VocabType.RAW, vocab_size=vocab, stop_token_ids=stops)
    x_grammar = xgr.GrammarCompiler(info, max_threads=1).compile_json_schema(schema)
    x_setup = time.perf_counter() - start
    start = time.perf_counter()
    l_tok = llg.LLTokenizer(str(tokenizer_json), n_vocab=vocab, eos_token=stops)
    l_grammar = llg.LLMatcher.grammar_from_json_schema(schema)
    llg.LLMatcher(l_tok, l_grammar)
    l_setup = time.perf_counter() - start
    ids = [tok.encode(d) + [stops[0]] for d in docs]
    out = {"vocab_size": vocab, "tokens": sum(map(len, ids))}
    for name in ("xgrammar", "llguidance"):
        spent = 0.0
        for doc in ids:
            if name == "xgrammar":
                m, mask = xgr.GrammarMatcher(x_grammar), xgr.allocate_token_bitmask(1, vocab)
                fill, accept = (lambda: m.fill_next_token_bitmask(mask, 0)), m.accept_token
            else:
                m, mask = llg.LLMatcher(l_tok, l_grammar), llg_torch.allocate_token_bitmask(1, vocab)
                fill, accept = (lambda: llg_torch.fill_next_token_bitmask(m, mask, 0)), m.consume_token
            for t in doc:
                t0 = time.perf_counter()
                fill()
                spent += time.perf_counter() - t0
                if not accept(t):
                    raise RuntimeError(f"{name} rejected token {t} of a valid document")
        out[f"{name}_us_per_token"] = round(spent / out["tokens"] * 1e6, 2)
    out["xgrammar_setup_s"], out["llguidance_setup_s"] = round(x_setup, 3), round(l_setup, 3)
    return out


def train_large_vocab(out_dir: Path, vocab_size: int = 150_000, corpus_bytes: int = 120_000_000) -> Path:
    """A byte-level BPE of `vocab_size` ids trained on Python source found on this machine (the
    standard library and site-packages), with the GLM special tokens: a realistic large vocabulary
    without a download. Returns its tokenizer.json."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers

    from inference.chat.special_tokens import SPECIAL_TOKENS

    roots = sorted({Path(p) for p in sys.path if p and Path(p).is_dir() and "python3" in p})

    def texts():
        seen = 0
        for root in roots:
            for f in sorted(root.rglob("*.py")):
                try:
                    text = f.read_text(encoding="utf-8")
                except (OSError, UnicodeDecodeError):
                    continue
                seen += len(text)
                yield text
                if seen > corpus_bytes:
                    return

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size - len(SPECIAL_TOKENS), min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts(), trainer=trainer)
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    out_dir.mkdir(parents=True, exist_ok=True)
    tok.save(str(out_dir / "tokenizer.json"))
    return out_dir / "tokenizer.json"
