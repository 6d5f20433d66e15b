"""Kernel benchmark: each Triton kernel against its torch reference, measured in the same run.

    python benchmarks/kernels.py [--quick] [--only NAME ...]

On CUDA it prints a table of median times, the speedup (reference time / Triton time), the
bandwidth the Triton kernel achieved over the bytes it must move, and its error against the
reference (the run fails if a kernel disagrees). Without a GPU it cannot time anything useful:
it runs the references and the Triton interpreter on small shapes, checks that they agree and
says that timings need a GPU. Shapes follow GLM-5 (serving.md §5, glm5-model.md §A/§D).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

ON_GPU = torch.cuda.is_available()
if not ON_GPU:
    # The interpreter must be on before triton is first imported (importing torch does not import it).
    os.environ.setdefault("TRITON_INTERPRET", "1")
# This file is itself named kernels.py: put the repository root first so `kernels` is the package.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kernels import fused_moe, indexer_scores, indexer_topk, sparse_mla_attention  # noqa: E402

H200_HBM_GBPS = 4800.0


@dataclass
class Case:
    name: str
    shape: str
    run: Callable[[str], object]  # backend -> output
    error: Callable[[object, object], float]  # (triton out, torch out) -> normalized error
    tolerance: float
    bytes_moved: int  # compulsory HBM traffic of one call


def _rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.float(), b.float()
    finite = torch.isfinite(b)
    if not torch.equal(finite, torch.isfinite(a)):
        return float("inf")
    return float((a[finite] - b[finite]).abs().max() / b[finite].abs().max().clamp(min=1.0))


def _paged_keys(B: int, S: int, width: int, page_size: int, device, dtype, gen):
    """B sequences of S keys on shuffled pages: (cache [pages, page_size, width], key_slots [B, S])."""
    pages = B * S // page_size
    cache = torch.randn(pages, page_size, width, generator=gen, device=device).to(dtype)
    perm = torch.randperm(pages, generator=gen, device=device).view(B, S // page_size)
    pos = torch.arange(S, device=device)
    key_slots = (perm[:, pos // page_size] * page_size + pos % page_size).to(torch.int32)
    return cache, key_slots


def indexer_cases(T_per_seq: int, B: int, S: int, device, gen) -> list[Case]:
    H, D, topk = 32, 128, 2048
    keys, key_slots = _paged_keys(B, S, D, 64, device, torch.bfloat16, gen)
    T = B * T_per_seq
    q = torch.randn(T, H, D, generator=gen, device=device).to(torch.bfloat16)
    w = torch.randn(T, H, generator=gen, device=device) * H**-0.5
    seq = torch.arange(B, device=device, dtype=torch.int32).repeat_interleave(T_per_seq)
    pos = (S - T_per_seq + torch.arange(T_per_seq, device=device, dtype=torch.int32)).repeat(B)
    args = (q, w, keys, key_slots, seq, pos)
    kind = "decode" if T_per_seq == 1 else "mtp" if T_per_seq <= 4 else "prefill"
    shape = f"T={T} B={B} S={S} H={H} D={D}"
    key_bytes = B * S * D * 2 + B * S * 4  # keys + their slot ids, read once per sequence at best
    ref_scores: dict[str, torch.Tensor] = {}

    def topk_overlap_error(got, want) -> float:
        if "s" not in ref_scores:
            ref_scores["s"] = indexer_scores(*args, D**-0.5, backend="torch")
        scores = ref_scores["s"]
        # Near-ties may swap between summation orders; compare the selected *scores*.
        a = scores.gather(1, got.positions.long().clamp(min=0)).sort(1).values
        b = scores.gather(1, want.positions.long().clamp(min=0)).sort(1).values
        return _rel_err(a, b)

    k = min(topk, S)
    return [
        Case(f"indexer_scores_{kind}", shape, lambda be: indexer_scores(*args, D**-0.5, backend=be),
             _rel_err, 1e-2, key_bytes + T * S * 4),
        Case(f"indexer_topk_{kind}", shape + f" k={k}", lambda be: indexer_topk(*args, topk, D**-0.5, backend=be),
             topk_overlap_error, 1e-2, key_bytes + T * k * 8),  # fused: no scores written
    ]  # fmt: skip


def sparse_mla_case(T: int, H: int, K: int, num_slots: int, device, gen) -> Case:
    R, P = 512, 64
    cache = torch.randn(num_slots // 64, 64, R + P, generator=gen, device=device).to(torch.bfloat16)
    q = torch.randn(T, H, R + P, generator=gen, device=device).to(torch.bfloat16)
    slots = torch.randint(0, num_slots, (T, K), generator=gen, device=device, dtype=torch.int32)
    scale = 256**-0.5  # GLM-5 qk_head_dim**-0.5
    moved = T * K * ((R + P) * 2 + 4) + T * H * (R + P) * 2 + T * H * (R * 2 + 4)

    def run(be):
        return sparse_mla_attention(q, cache, slots, scale, R, backend=be)

    def error(got, want) -> float:
        return max(_rel_err(got[0], want[0]), _rel_err(got[1], want[1]))

    return Case("sparse_mla", f"T={T} H={H} K={K} row={R}+{P}", run, error, 2e-2, moved)


def fused_moe_case(name: str, T: int, E: int, top_k: int, H: int, I: int, device, gen) -> Case:
    hidden = torch.randn(T, H, generator=gen, device=device).to(torch.bfloat16)
    gate_up = (torch.randn(E, 2 * I, H, generator=gen, device=device) * H**-0.5).to(torch.bfloat16)
    down = (torch.randn(E, H, I, generator=gen, device=device) * I**-0.5).to(torch.bfloat16)
    ids = torch.rand(T, E, generator=gen, device=device).topk(top_k, dim=1).indices
    weights = torch.rand(T, top_k, generator=gen, device=device)
    active = int(torch.unique(ids).numel())
    moved = active * 3 * I * H * 2 + 2 * T * H * 2 + T * top_k * (I * 2 * 2 + H * 4)

    def run(be):
        return fused_moe(hidden, gate_up, down, ids, weights, backend=be)

    shape = f"T={T} E={E} k={top_k} H={H} I={I} active={active}"
    return Case(name, shape, run, _rel_err, 3e-2, moved)


def build_cases(quick: bool, device) -> list[Case]:
    gen = torch.Generator(device=device).manual_seed(0)
    if not ON_GPU:  # interpreter: tiny shapes, correctness only
        return [
            *indexer_cases(1, 2, 256, device, gen),
            *indexer_cases(3, 2, 128, device, gen),  # several tokens per sequence: MTP verify
            sparse_mla_case(2, 16, 64, 512, device, gen),
            fused_moe_case("fused_moe", 4, 8, 2, 64, 32, device, gen),
        ]
    if quick:
        return [
            *indexer_cases(1, 8, 4096, device, gen),
            *indexer_cases(64, 1, 4096, device, gen),
            sparse_mla_case(8, 64, 2048, 1 << 16, device, gen),
            fused_moe_case("fused_moe_decode", 4, 256, 8, 6144, 256, device, gen),
            fused_moe_case("fused_moe_prefill", 256, 256, 8, 6144, 256, device, gen),
        ]
    return [
        *indexer_cases(1, 64, 32768, device, gen),  # decode: 64 sequences at 32K context
        *indexer_cases(512, 1, 16384, device, gen),  # a 512-token prefill chunk at 16K
        sparse_mla_case(64, 64, 2048, 1 << 20, device, gen),  # 64 decode tokens, all 64 heads (TP1)
        sparse_mla_case(64, 16, 2048, 1 << 20, device, gen),  # the same at 16 heads (TP4)
        sparse_mla_case(4, 16, 2048, 1 << 20, device, gen),  # small batch: relies on split rows
        fused_moe_case("fused_moe_decode", 32, 256, 8, 6144, 256, device, gen),  # TP8 shard, I=2048/8
        fused_moe_case("fused_moe_prefill", 2048, 256, 8, 6144, 256, device, gen),
    ]


def time_cuda_ms(fn: Callable[[], object], iters: int) -> float:
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small shapes, few iterations")
    parser.add_argument("--only", nargs="*", default=None, help="run only cases whose name starts with these")
    args = parser.parse_args(argv)
    device = torch.device("cuda" if ON_GPU else "cpu")
    cases = [c for c in build_cases(args.quick, device) if not args.only or c.name.startswith(tuple(args.only))]
    if not ON_GPU:
        print("No CUDA device: timings need a GPU (run this on an H200 for the table).")
        print("Checking correctness only: Triton interpreter vs torch reference on small shapes.\n")
    iters = 5 if args.quick else 20
    header = f"{'kernel':<24} {'shape':<46} {'err':>8}"
    if ON_GPU:
        header += f" {'torch ms':>9} {'triton ms':>9} {'speedup':>8} {'GB/s':>7} {'%HBM':>5}"
    print(header)
    print("-" * len(header))
    failed = []
    for case in cases:
        err = case.error(case.run("triton"), case.run("torch"))
        ok = err <= case.tolerance
        failed += [] if ok else [case.name]
        line = f"{case.name:<24} {case.shape:<46} {err:>8.1e}"
        if ON_GPU:
            t_ref = time_cuda_ms(lambda: case.run("torch"), iters)
            t_tri = time_cuda_ms(lambda: case.run("triton"), iters)
            gbps = case.bytes_moved / (t_tri * 1e-3) / 1e9
            line += f" {t_ref:>9.3f} {t_tri:>9.3f} {t_ref / t_tri:>7.2f}x {gbps:>7.0f} {100 * gbps / H200_HBM_GBPS:>4.0f}%"
        print(line + ("" if ok else f"  MISMATCH (tolerance {case.tolerance:.0e})"), flush=True)
    if ON_GPU:
        print("\nspeedup = torch reference time / Triton time; GB/s over the compulsory bytes of one call;")
        print(f"%HBM against {H200_HBM_GBPS:.0f} GB/s (H200).")
    else:
        print("\nAll kernels agree with their references." if not failed else "")
    if failed:
        print(f"FAILED: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
