"""`horizon model ...`: make random checkpoints and describe checkpoints."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def register(subparsers) -> None:
    parser = subparsers.add_parser("model", help="GLM-5.x checkpoints: make random ones, describe any")
    sub = parser.add_subparsers(dest="model_command", metavar="ACTION", required=True)

    init = sub.add_parser("init-random", help="write a random GLM-5.x checkpoint in the real on-disk format")
    init.add_argument("out", type=Path, help="output directory")
    init.add_argument("--preset", choices=["tiny", "small", "glm53-2layer", "flash-tiny", "flash-small"], default="tiny",
                      help="tiny/small: GLM-5.x (glm_moe_dsa); glm53-2layer: GLM-5.3 at full width, 2 layers "
                           "(~14 GB with --fp8; use --device cuda); flash-*: GLM-5.3-Flash (glm5_next)")
    init.add_argument("--device", default="cpu", help="draw the weights here (cuda: seconds for glm53-2layer)")
    init.add_argument("--seed", type=int, default=0)
    init.add_argument("--fp8", action="store_true", help="FP8 e4m3 weights with 128x128 weight_scale_inv blocks")
    init.add_argument("--fp8-block", default="128,128", metavar="ROWS,COLS",
                      help="FP8 scale block (tiny presets need small ones, e.g. 8,8, for scales to vary)")
    init.add_argument("--shards", type=int, default=2, help="number of safetensors files (>= 1)")
    init.add_argument("--force", action="store_true",
                      help="write into a non-empty OUT, first removing its checkpoint files (others stay)")
    init.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
        help="override a config.json field (VALUE parsed as JSON, else taken as a string); repeatable",
    )  # fmt: skip
    init.set_defaults(func=_init_random)

    info = sub.add_parser("info", help="config summary, parameter count and KV-cache bytes per token")
    info.add_argument("path", type=Path, help="checkpoint directory")
    info.add_argument("--json", action="store_true", help="print one JSON object")
    info.set_defaults(func=_info)

    plan = sub.add_parser("plan", help="weights per GPU, KV bytes per token, KV tokens and 100K sessions that fit")
    plan.add_argument("checkpoint", help="checkpoint directory or config.json (no weights needed), or a shipped "
                      f"reference config: {', '.join(sorted(REFERENCE_CONFIGS))}")
    plan.add_argument("--gpus", type=int, default=8)
    plan.add_argument("--gpu-memory", default="141GiB", help="memory per GPU, e.g. 141GiB, 143771MiB, 80GB")
    plan.add_argument("--tp", type=int, default=None, help="tensor-parallel size (default: --gpus)")
    plan.add_argument("--ep", type=int, default=None, help="expert-parallel size (default: --tp)")
    plan.add_argument("--kv-cache-dtype", choices=["fp8", "auto"], default="fp8", help="auto = bf16")
    plan.add_argument("--weight-format", choices=["fp8", "bf16"], default=None,
                      help="default: fp8 when the config has an FP8 quantization_config")
    plan.add_argument("--memory-fraction", type=float, default=0.90)
    plan.add_argument("--reserve", default="6GiB", help="runtime reserve per GPU (activations, buffers, graphs)")
    plan.add_argument("--dp-attention", action="store_true",
                      help="also plan data-parallel attention + expert parallelism over all GPUs")
    plan.add_argument("--dp-reserve", default="8GiB", help="runtime reserve per GPU under DP-attention")
    plan.add_argument("--json", action="store_true", help="print one JSON object")
    plan.set_defaults(func=_plan)


REFERENCE_CONFIGS = {"glm-5.3": "glm-5.3-fp8.json"}


def parse_overrides(items: list[str]) -> dict:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--set {item!r}: expected KEY=VALUE")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


def _init_random(args: argparse.Namespace) -> int:
    from inference.config import ConfigError
    from inference.random_checkpoint import check_args, clear_checkpoint_files, write_random_checkpoint

    try:
        overrides = parse_overrides(args.overrides)
        try:
            fp8_block = tuple(int(v) for v in args.fp8_block.split(","))
        except ValueError:
            raise ValueError(f"--fp8-block {args.fp8_block!r}: expected ROWS,COLS (two ints)") from None
        flash = args.preset.startswith("flash-")
        if flash:
            from inference.glm5_next.random_checkpoint import check_flash_args, write_flash_checkpoint

            check_flash_args(args.preset, overrides, args.shards)
            if args.device != "cpu":
                raise ValueError(f"--device {args.device}: the flash presets are drawn on the CPU only")
        else:
            check_args(args.preset, overrides, args.shards)
        if args.out.exists() and not args.out.is_dir():
            raise ValueError(f"{args.out}: exists and is not a directory")
        if args.out.is_dir() and any(args.out.iterdir()):
            if not args.force:
                raise ValueError(f"{args.out}: directory is not empty (pass --force to replace the checkpoint in it)")
            clear_checkpoint_files(args.out)
        if flash:
            write_flash_checkpoint(args.out, args.preset, args.seed, overrides, fp8=args.fp8, shards=args.shards,
                                   fp8_block=fp8_block)
        else:
            write_random_checkpoint(args.out, args.preset, args.seed, overrides, fp8=args.fp8, shards=args.shards,
                                    fp8_block=fp8_block, device=args.device)
    except (ValueError, ConfigError) as exc:
        print(f"horizon model init-random: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {args.preset} checkpoint to {args.out}")
    return 0


def describe(path: Path) -> dict:
    import torch

    from inference.config import ModelConfig
    from inference.kv_cache import kv_bytes_per_token
    from inference.loader import checkpoint_files, tensor_sizes

    config = ModelConfig.from_pretrained(path)
    files = checkpoint_files(path)
    sizes = tensor_sizes(files)
    weights = {name: n for name, n in sizes.items() if not name.endswith("_scale_inv")}  # FP8 scales are not parameters
    mtp_prefix = f"model.layers.{config.num_hidden_layers}."
    return {
        "path": str(path),
        "config": config.summary(),
        "parameters": sum(weights.values()),
        "mtp_parameters": sum(n for name, n in weights.items() if name.startswith(mtp_prefix)),
        "fp8_weights": len(weights) < len(sizes),  # some tensors are FP8 block scales
        "shards": len(set(files.values())),
        "kv_bytes_per_token_bf16": kv_bytes_per_token(config, torch.bfloat16),
        "kv_bytes_per_token_fp32": kv_bytes_per_token(config, torch.float32),
        "kv_bytes_per_token_fp8": kv_bytes_per_token(config, torch.bfloat16, "fp8"),
    }


def _info(args: argparse.Namespace) -> int:
    from inference.config import ConfigError
    from inference.loader import CheckpointError

    from inference.glm5_next.describe import describe_flash, is_flash_checkpoint

    flash = is_flash_checkpoint(args.path)
    try:
        info = describe_flash(args.path) if flash else describe(args.path)
    except (ConfigError, CheckpointError, OSError) as exc:
        print(f"horizon model info: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(info))
        return 0
    if flash:
        print(f"{info['path']}: GLM-5.3-Flash, {info['parameters']:,} parameters ({info['vision_parameters']:,} vision, "
              f"{info['mtp_parameters']:,} MTP), {info['shards']} shard(s){', FP8 block-quantized' if info['fp8_weights'] else ''}")
        for key, value in info["config"].items():
            print(f"  {key:>14}: {value}")
        print(f"  DSA cache/token: {info['kv_bytes_per_token_bf16']:,} B bf16, {info['kv_bytes_per_token_fp32']:,} B fp32;"
              f" KDA state/sequence: {info['kda_state_bytes_per_sequence']:,} B (fp32, fixed)")
        return 0
    print(f"{info['path']}: {info['parameters']:,} parameters ({info['mtp_parameters']:,} in the MTP layer), "
          f"{info['shards']} shard(s){', FP8 block-quantized' if info['fp8_weights'] else ''}")  # fmt: skip
    for key, value in info["config"].items():
        print(f"  {key:>14}: {value}")
    print(f"  KV cache/token: {info['kv_bytes_per_token_bf16']:,} B bf16, {info['kv_bytes_per_token_fp8']:,} B fp8 "
          f"(fp8_ds_mla), {info['kv_bytes_per_token_fp32']:,} B fp32")
    return 0


def _plan(args: argparse.Namespace) -> int:
    from inference.config import ConfigError, ModelConfig
    from inference.memory_plan import parse_bytes, plan
    from inference.parallel.state import ParallelConfigError

    source = args.checkpoint
    if source in REFERENCE_CONFIGS:
        source = Path(__file__).parent / "configs" / REFERENCE_CONFIGS[source]
    try:
        config = ModelConfig.from_pretrained(Path(source))
        result = plan(config, args.gpus, parse_bytes(args.gpu_memory), args.tp, args.ep, args.kv_cache_dtype,
                      args.weight_format, args.memory_fraction, parse_bytes(args.reserve), args.dp_attention,
                      parse_bytes(args.dp_reserve))
    except (ConfigError, ParallelConfigError, ValueError, OSError) as exc:
        print(f"horizon model plan: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(result.to_dict()) if args.json else result.describe())
    return 0
