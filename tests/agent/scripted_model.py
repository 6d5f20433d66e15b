"""A tiny checkpoint whose greedy output is one fixed GLM reply, produced by a real forward pass.

Every layer's output projections are zeroed, so each position's final hidden state is its own
token's embedding; the reply's tokens get orthonormal embeddings and `lm_head` maps each of them
to the next one. Greedy decoding after `<think>` therefore writes the reply, then the stop token.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

REPLY = ("Need files</think>Listing:<tool_call>bash<arg_key>command</arg_key>"
         "<arg_value>ls -la</arg_value></tool_call>")


def write_scripted_checkpoint(out: Path, reply: str = REPLY) -> Path:
    from inference.random_checkpoint import write_random_checkpoint
    from inference.tokenizer import Tokenizer

    write_random_checkpoint(out, preset="tiny", seed=0)
    tok = Tokenizer.from_pretrained(out)
    chain = [tok.token_id("<think>"), *tok.encode(reply), tok.token_id("<|observation|>")]
    assert len(set(chain[:-1])) == len(chain) - 1, "the next token must be a function of the current one"
    hidden = json.loads((out / "config.json").read_text())["hidden_size"]
    basis, _ = torch.linalg.qr(torch.randn(hidden, len(chain) - 1, generator=torch.Generator().manual_seed(0)))
    shards = set(json.loads((out / "model.safetensors.index.json").read_text())["weight_map"].values())
    for shard in sorted(shards):
        tensors = load_file(out / shard)
        for name, t in tensors.items():
            if name.endswith(("o_proj.weight", "down_proj.weight")):
                tensors[name] = torch.zeros_like(t)
            elif name == "model.norm.weight":
                tensors[name] = torch.ones_like(t)
            elif name == "model.embed_tokens.weight":
                embed = t.float().clone()
                embed[chain[:-1]] = (basis * 4.0).T
                tensors[name] = embed.to(t.dtype)
            elif name == "lm_head.weight":
                head = torch.zeros_like(t, dtype=torch.float32)
                for i, nxt in enumerate(chain[1:]):
                    head[nxt] += basis[:, i] * 8.0
                tensors[name] = head.to(t.dtype)
        save_file(tensors, out / shard, metadata={"format": "pt"})
    return out
