"""Tiny transformers Glm5NextForConditionalGeneration references (the oracle), O(1) random weights."""

from __future__ import annotations

import math

import torch

# 8 layers: KDA at 0-2 and 4-6, DSA at 3 and 7; dense FFN on the first 3, MoE after.
# index_topk 8 with kpool 4: 2 pools selected, so prompts of 20+ tokens really drop keys.
# 32 indexer heads as the release: with fewer, exact all-zero score ties let topk pick differently.
TINY_TEXT = dict(
    vocab_size=96, hidden_size=48, intermediate_size=80, moe_intermediate_size=24, num_hidden_layers=8,
    num_attention_heads=4, num_key_value_heads=4, q_lora_rank=32, kv_lora_rank=24, qk_nope_head_dim=12,
    qk_rope_head_dim=0, v_head_dim=16, n_routed_experts=8, n_shared_experts=1, num_experts_per_tok=2,
    index_topk=8, index_n_heads=32, index_head_dim=16, index_kpool=4, linear_head_dim=8, linear_num_heads=4,
    linear_conv_kernel_dim=4, hc_mult=4, hc_sinkhorn_iters=20, swiglu_limit=10.0, pad_token_id=0, eos_token_id=[1],
)  # fmt: skip
TINY_VISION = dict(depth=1, hidden_size=32, num_heads=2, intermediate_size=32, out_hidden_size=48,
                   projection_intermediate_size=32, patch_size=14, spatial_merge_size=2, temporal_patch_size=2)


def randomize_(model: torch.nn.Module, seed: int) -> None:
    """O(1) activations (transformers' 0.02 init would make every comparison trivially pass).
    The forget-gate parameters get realistic ranges so decays are neither ~1 nor ~0."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in list(model.named_parameters()) + list(model.named_buffers()):
            if "inv_freq" in name:  # the vision RoPE's frequencies are computed, not weights
                continue
            noise = torch.randn(p.shape, generator=gen)
            if name.endswith("A_log") or name.endswith("dt_bias"):
                p.copy_(0.5 * noise)
            elif name.endswith("hc.scale"):
                p.copy_(1.0 + 0.1 * noise)
            elif name.endswith("e_score_correction_bias") or name.endswith(".bias") or name.endswith("hc.base"):
                p.copy_(0.1 * noise)
            elif p.dim() == 1:
                p.copy_(1.0 + 0.1 * noise)
            elif "embed_tokens" in name:
                p.copy_(noise)
            elif name.endswith("conv1d.weight"):
                p.copy_(noise / math.sqrt(p.shape[-1]))
            else:
                p.copy_(noise / math.sqrt(p.shape[-1]))


# Placeholder ids inside the tiny vocabulary (the release's 154854.. would not fit).
IMAGE_TOKEN, VIDEO_START, VIDEO_END = 90, 91, 92


def make_hf_flash(seed: int = 0, **text_overrides):
    from transformers import Glm5NextConfig, Glm5NextForConditionalGeneration

    torch.manual_seed(seed)
    config = Glm5NextConfig(text_config={**TINY_TEXT, **text_overrides}, vision_config=TINY_VISION,
                            image_token_id=IMAGE_TOKEN, video_start_token_id=VIDEO_START, video_end_token_id=VIDEO_END)
    config.text_config._attn_implementation = "eager"
    config._attn_implementation = "eager"
    model = Glm5NextForConditionalGeneration(config).eval()
    randomize_(model, seed)
    return model
