"""The MTP draft layer against an independent evaluation of the spec formula (docs §C.4):

    u = eh_proj([enorm(embed(t_{p+1})) ; hnorm(h_p)]),  z = Block_L(u),  logits = lm_head(shared_head.norm(z))

The formula is written here in plain torch from the raw checkpoint tensors; the decoder block is
transformers' GlmMoeDsaDecoderLayer (the oracle) loaded with layer L's tensors.
"""

from __future__ import annotations

import pytest
import torch

from inference.forward_batch import ForwardBatch
from inference.loader import checkpoint_files, load_model

TOL = 1e-4


def _raw_tensors(path) -> dict[str, torch.Tensor]:
    from safetensors import safe_open

    out = {}
    for name, file in checkpoint_files(path).items():
        with safe_open(file, framework="pt") as f:
            out[name] = f.get_tensor(name).float()
    return out


def _rms(x, w, eps):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def _hf_block(raw, cfg):
    """transformers' decoder layer holding the MTP layer's block weights."""
    from transformers import GlmMoeDsaConfig
    from transformers.models.glm_moe_dsa.modeling_glm_moe_dsa import (
        GlmMoeDsaDecoderLayer,
        GlmMoeDsaRotaryEmbedding,
    )

    hf_cfg = GlmMoeDsaConfig(
        **{k: v for k, v in cfg.to_dict().items() if k not in ("indexer_types", "mlp_layer_types", "num_hidden_layers")},
        num_hidden_layers=1, indexer_types=["full"], mlp_layer_types=["sparse"],
        attn_implementation="eager",
    )  # fmt: skip
    block = GlmMoeDsaDecoderLayer(hf_cfg, 0).eval()
    prefix = f"model.layers.{cfg.num_hidden_layers}."
    state = {k[len(prefix) :]: v for k, v in raw.items() if k.startswith(prefix)}
    e = cfg.n_routed_experts
    state["mlp.experts.gate_up_proj"] = torch.stack(
        [torch.cat([state.pop(f"mlp.experts.{i}.gate_proj.weight"), state.pop(f"mlp.experts.{i}.up_proj.weight")]) for i in range(e)]
    )
    state["mlp.experts.down_proj"] = torch.stack([state.pop(f"mlp.experts.{i}.down_proj.weight") for i in range(e)])
    extras = {k: state.pop(k) for k in list(state) if k.split(".")[0] in ("enorm", "hnorm", "eh_proj", "shared_head")}
    block.load_state_dict(state, strict=True)
    return block, GlmMoeDsaRotaryEmbedding(hf_cfg), extras


@pytest.fixture(scope="module")
def setup(tiny_checkpoint):
    # transformers builds q_a/kv_a norms with eps 1e-6; match it for the oracle block.
    model = load_model(tiny_checkpoint, dtype=torch.float32, latent_norm_eps=1e-6)
    return model, _raw_tensors(tiny_checkpoint)


def test_mtp_logits_match_the_formula(setup):
    model, raw = setup
    cfg = model.config
    tokens = torch.randint(0, cfg.vocab_size, (21,), generator=torch.Generator().manual_seed(0))
    n = 20  # > index_topk: the MTP layer's own indexer must really select
    cache = model.new_cache(num_pages=6, page_size=4)
    pages = [5, 0, 3, 1, 4, 2]
    target = model.forward_batch(ForwardBatch.build([tokens[:n].tolist()], [0], [pages], logits="all"), cache, return_all_hidden=True)
    hidden = target.all_hidden_states  # h_p after model.norm, p = 0..n-1

    draft = ForwardBatch.build([tokens[1 : n + 1].tolist()], [0], [pages], logits="all")
    ours = model.mtp_forward(draft, hidden, cache).logits

    block, rotary, extra = _hf_block(raw, cfg)
    eps = cfg.rms_norm_eps
    e = raw["model.embed_tokens.weight"][tokens[1 : n + 1]]
    u = torch.cat([_rms(e, extra["enorm.weight"], eps), _rms(hidden, extra["hnorm.weight"], eps)], -1) @ extra["eh_proj.weight"].T
    pos = torch.arange(n).unsqueeze(0)
    mask = torch.full((n, n), torch.finfo(torch.float32).min).triu(1).view(1, 1, n, n)
    with torch.no_grad():
        z, _ = block(u.unsqueeze(0), attention_mask=mask, position_ids=pos, position_embeddings=rotary(u, pos))
    ref = _rms(z[0], extra["shared_head.norm.weight"], eps) @ raw["lm_head.weight"].T
    assert ref.abs().max() > 1.0
    assert (ours - ref).abs().max().item() <= TOL


def test_mtp_decode_steps_match_mtp_prefill(setup):
    """The MTP layer's own cache: drafting one position at a time == drafting all at once."""
    model, _ = setup
    cfg = model.config
    tokens = torch.randint(0, cfg.vocab_size, (19,), generator=torch.Generator().manual_seed(1)).tolist()
    pages = [0, 1, 2, 3, 4]
    cache_a, cache_b = model.new_cache(5, 4), model.new_cache(5, 4)
    target = ForwardBatch.build([tokens[:18]], [0], [pages], logits="all")
    hidden = model.forward_batch(target, cache_a, return_all_hidden=True).all_hidden_states
    model.forward_batch(target, cache_b)
    at_once = model.mtp_forward(ForwardBatch.build([tokens[1:19]], [0], [pages], logits="all"), hidden, cache_a).logits
    steps, pos = [], 0
    for n in [10, 1, 1, 4, 1, 1]:
        batch = ForwardBatch.build([tokens[pos + 1 : pos + 1 + n]], [pos], [pages], logits="all")
        steps.append(model.mtp_forward(batch, hidden[pos : pos + n], cache_b).logits)
        pos += n
    assert (torch.cat(steps) - at_once).abs().max().item() <= TOL


def test_mtp_rejects_wrong_hidden_shape(setup):
    model, _ = setup
    batch = ForwardBatch.build([[1, 2, 3]], [0], [[0]])
    with pytest.raises(ValueError, match="prev_hidden"):
        model.mtp_forward(batch, torch.zeros(2, model.config.hidden_size), model.new_cache(1, 4))
