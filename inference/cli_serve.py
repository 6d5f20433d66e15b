"""`horizon serve --model PATH`: the OpenAI-compatible HTTP server over the embedded engine.

`python -m inference.cli_serve --model PATH ...` is the same command for a checkout that is not
installed (no `horizon` entry point), e.g. on the GPU machine scripts/gpu_check.sh runs on."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from inference.chat.variants import ALIASES, VARIANTS


def register(subparsers) -> None:
    p = subparsers.add_parser("serve", help="serve a GLM-5.x checkpoint over an OpenAI-compatible HTTP API")
    p.add_argument("--model", type=Path, required=True, help="checkpoint directory (config.json, safetensors, tokenizer)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--served-model-name", default=None, help="model id clients use (default: the folder name)")
    p.add_argument("--chat-template", dest="variant", choices=sorted([*VARIANTS, *ALIASES]), default=None,
                   help="template generation (default: detected from the checkpoint's chat_template.jinja)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    p.add_argument("--kv-cache-dtype", default="auto", choices=["auto", "fp8"],
                   help="KV cache format: auto = the model dtype; fp8 = fp8_ds_mla latent + FP8 indexer keys "
                        "(about 0.56x the bf16 bytes per token)")
    p.add_argument("--weight-format", default="auto", choices=["auto", "dequant", "fp8", "fp8_w8a8"],
                   help="FP8 checkpoints: dequant = expand to --dtype at load; fp8 = keep e4m3 + block scales, "
                        "dequantize per call; fp8_w8a8 = keep them, FP8 GEMMs; auto = dequant on CPU, fp8_w8a8 on CUDA")
    p.add_argument("--cuda-graphs", dest="decode_graphs", action=argparse.BooleanOptionalAction, default=None,
                   help="decode steps (and MTP verify/draft passes) as graphs: CUDA graphs on CUDA, torch.compile "
                        "on CPU, built at start-up (default: on for CUDA, off on CPU)")
    p.add_argument("--compile-decode", dest="decode_graphs", action="store_const", const=True,
                   help="the earlier name of --cuda-graphs (on CPU: torch.compile; start-up pays tens of seconds)")
    p.add_argument("--overlap-schedule", dest="overlap_schedule", action=argparse.BooleanOptionalAction, default=None,
                   help="launch each decode step before reading the previous one's tokens (default: on for CUDA "
                        "with one rank and no --speculative-tokens, off on CPU, where the forward then runs on a "
                        "worker thread)")
    p.add_argument("--graph-max-batch", type=int, default=None, help="largest decode batch served by a graph (64)")
    p.add_argument("--kv-budget-tokens", type=int, default=None,
                   help="device KV cache size in tokens (default: the model's context, at most 65536 tokens / 8 GiB)")
    p.add_argument("--page-size", type=int, default=None, help="tokens per KV cache page (64)")
    p.add_argument("--host-budget-tokens", type=int, default=0, help="host-memory KV tier in tokens (0: off)")
    p.add_argument("--max-running", type=int, default=64, help="requests decoded together")
    p.add_argument("--session-ttl", type=float, default=300.0, help="seconds a session's cache is protected")
    p.add_argument("--speculative-tokens", type=int, default=0, help="MTP draft tokens per step")
    p.add_argument("--max-image-bytes", type=int, default=None,
                   help="vision checkpoints: the largest encoded image a request may carry (default 20 MiB)")
    p.add_argument("--max-inflight", type=int, default=256, help="requests admitted before answering 503")
    p.add_argument("--default-max-tokens", type=int, default=4096)
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel ranks (processes; one GPU each on CUDA)")
    p.add_argument("--ep", type=int, default=None, help="expert-parallel size (default: --tp, whole experts per rank)")
    p.add_argument("--dp-attention", action="store_true",
                   help="data-parallel attention over the --tp ranks: each rank runs all heads over its own sequences "
                        "and KV pages (sessions stay on one rank), only the routed experts are split")
    p.add_argument("--dp", type=int, default=None, help="N ranks with data-parallel attention: --tp N --dp-attention")
    p.add_argument("--dp-extras", choices=["split", "replicated"], default="split",
                   help="with DP attention: the embedding, LM head, dense MLPs and shared expert split over the ranks "
                        "(default; their tokens exchanged, more KV per rank) or replicated on each")
    p.add_argument("--dist-backend", choices=["auto", "gloo", "nccl"], default="auto")
    p.add_argument("--dist-timeout", type=float, default=120.0,
                   help="seconds a collective may wait before a hung or dead rank fails the server")
    p.add_argument("--reduce-dtype", choices=["float32", "model"], default="float32",
                   help="bf16/fp16 tensor-parallel partial sums reduced in fp32 (default; twice the bytes) or in "
                        "the model dtype")
    p.add_argument("--log-level", default="info")
    p.set_defaults(func=_serve)


def _ranks(args: argparse.Namespace) -> tuple[int, bool] | str:
    """(ranks, DP attention) from --tp / --dp / --dp-attention, or why they do not go together."""
    if args.dp is None:
        return args.tp, args.dp_attention
    if args.tp not in (1, args.dp):
        return (f"--dp {args.dp} with --tp {args.tp}: attention split by heads inside each DP group is not supported; "
                f"give --dp N alone, or --tp N --dp-attention")
    return args.dp, True


def _serve(args: argparse.Namespace) -> int:
    from inference.engine_defaults import EngineSettingsError, default_engine_config
    from inference.server.runner import build_state, listen_socket, serve

    if not (args.model / "config.json").is_file():
        print(f"horizon serve: --model {args.model}: no config.json there (expected a checkpoint directory)",
              file=sys.stderr)
        return 2
    ranks = _ranks(args)
    if isinstance(ranks, str):
        print(f"horizon serve: {ranks}", file=sys.stderr)
        return 2
    parallel = {"tensor_parallel_size": ranks[0], "attention_dp": ranks[1], "dp_extras": args.dp_extras,
                "expert_parallel_size": args.ep,
                "backend": args.dist_backend, "timeout_s": args.dist_timeout,
                "reduce_dtype": args.reduce_dtype}
    try:
        config = default_engine_config(
            args.model, device=args.device, dtype=args.dtype, kv_cache_dtype=args.kv_cache_dtype,
            kv_budget_tokens=args.kv_budget_tokens, page_size=args.page_size,
            host_budget_tokens=args.host_budget_tokens, max_running=args.max_running,
            session_ttl_s=args.session_ttl, num_speculative_tokens=args.speculative_tokens,
            decode_graphs=args.decode_graphs, graph_max_batch=args.graph_max_batch, parallel=parallel,
            overlap_schedule=args.overlap_schedule,
            weight_format=args.weight_format, max_image_bytes=args.max_image_bytes,
        )
    except EngineSettingsError as exc:
        print(f"horizon serve: invalid engine option: {exc}", file=sys.stderr)
        return 2
    from inference.parallel.settings import torchrun_rank

    run = torchrun_rank()
    if run is not None and run[0] != 0:  # torchrun: ranks other than 0 follow rank 0's engine
        from inference.parallel.engine_ranks import torchrun_follower

        return torchrun_follower(args.model, config, run[0])
    # Claim the port before the (slow) model load, so a busy port fails at once and nobody takes it meanwhile.
    try:
        sock = listen_socket(args.host, args.port)
    except OSError as exc:
        print(f"horizon serve: cannot listen on {args.host}:{args.port}: {exc.strerror or exc} "
              f"(choose another --port or --host)", file=sys.stderr)
        return 2
    with sock:
        try:
            state = build_state(args.model, config, args.served_model_name, args.variant, args.max_inflight,
                                args.default_max_tokens)
        except (ValueError, RuntimeError) as exc:  # e.g. a --tp the model cannot be split by
            print(f"horizon serve: {exc}", file=sys.stderr)
            return 2
        serve(state, args.host, args.port, args.log_level, sock=sock)
    if state.engine.fatal is not None:  # a rank died or hung: the requests in flight were failed
        print(f"horizon serve: stopped: {state.engine.fatal}", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m inference.cli_serve")
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["serve", *(sys.argv[1:] if argv is None else argv)])
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
