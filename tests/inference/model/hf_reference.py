"""Tiny transformers reference models (the oracle) with O(1) random weights."""

from __future__ import annotations

import math
from pathlib import Path

import torch

# Small enough to run in milliseconds, large enough that every feature is live: 24+ token
# prompts exceed index_topk=6, 8 indexer heads make exact score ties vanishingly rare.
TINY_HF = dict(
    vocab_size=96, hidden_size=48, intermediate_size=80, moe_intermediate_size=24,
    num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=4, q_lora_rank=32, kv_lora_rank=24,
    qk_nope_head_dim=12, qk_rope_head_dim=8, v_head_dim=16, n_routed_experts=8, n_shared_experts=1,
    num_experts_per_tok=2, n_group=1, topk_group=1, first_k_dense_replace=1, index_topk=6,
    index_n_heads=8, index_head_dim=16, rope_parameters={"rope_theta": 1e4, "rope_type": "default"},
    num_nextn_predict_layers=0, routed_scaling_factor=2.5, pad_token_id=0, eos_token_id=[1],
)  # fmt: skip


def randomize_(model: torch.nn.Module, seed: int) -> None:
    """O(1) activations everywhere (transformers' 0.02 init makes every test trivially pass)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in list(model.named_parameters()) + list(model.named_buffers()):
            if "inv_freq" in name:
                continue
            noise = torch.randn(p.shape, generator=gen)
            if name.endswith("e_score_correction_bias") or name.endswith(".bias"):
                p.copy_(0.1 * noise)
            elif p.dim() == 1:
                p.copy_(1.0 + 0.1 * noise)
            elif "embed_tokens" in name:
                p.copy_(noise)
            else:
                p.copy_(noise / math.sqrt(p.shape[-1]))


def make_hf_model(seed: int = 0, **overrides):
    from transformers import GlmMoeDsaConfig, GlmMoeDsaForCausalLM

    torch.manual_seed(seed)
    config = GlmMoeDsaConfig(**{**TINY_HF, **overrides}, attn_implementation="eager")
    model = GlmMoeDsaForCausalLM(config).eval()
    randomize_(model, seed)
    return model


def save_hf(model, path: Path) -> Path:
    model.save_pretrained(path)
    return path
