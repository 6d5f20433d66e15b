"""`horizon model info` for a GLM-5.3-Flash checkpoint: parameters, DSA cache bytes per token and
the fixed KDA state bytes per running sequence (the two numbers a server's memory plan needs)."""

from __future__ import annotations

from pathlib import Path

from inference.glm5_next.config import Glm5NextTextConfig


def is_flash_checkpoint(path: Path) -> bool:
    import json

    file = path / "config.json" if path.is_dir() else path
    try:
        return json.loads(file.read_text(encoding="utf-8")).get("model_type") in ("glm5_next", "glm5_next_text")
    except (OSError, ValueError):
        return False


def kv_bytes_per_token(config: Glm5NextTextConfig, element_size: int) -> int:
    """Per token, over the DSA layers: the MLA latent, plus indexer key + pool-gate logits on full layers."""
    dsa = [i for i in range(config.num_hidden_layers) if not config.is_kda(i)]
    full = sum(1 for i in dsa if config.is_full_indexer(i))
    return element_size * (len(dsa) * config.kv_lora_rank + full * 2 * config.index_head_dim)


def describe_flash(path: Path) -> dict:
    from inference.loader import checkpoint_files, tensor_sizes

    config = Glm5NextTextConfig.from_pretrained(path)
    files = checkpoint_files(path)
    sizes = tensor_sizes(files)
    counts = {"text": 0, "vision": 0, "mtp": 0}
    fp8 = False
    mtp = f"layers.{config.num_hidden_layers}."
    for name, n in sizes.items():
        if name.endswith("_scale_inv"):  # FP8 block scales are not parameters
            fp8 = True
            continue
        kind = "vision" if "visual." in name else "mtp" if mtp in name or ".shared_head." in name else "text"
        counts[kind] += n
    return {
        "path": str(path), "family": "glm5_next", "config": config.summary(),
        "parameters": sum(counts.values()), "vision_parameters": counts["vision"], "mtp_parameters": counts["mtp"],
        "fp8_weights": fp8, "shards": len(set(files.values())),
        "kv_bytes_per_token_bf16": kv_bytes_per_token(config, 2), "kv_bytes_per_token_fp32": kv_bytes_per_token(config, 4),
        "kda_state_bytes_per_sequence": config.kda_state_bytes_per_sequence,
    }  # fmt: skip
