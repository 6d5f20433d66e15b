"""Kernel benchmark: each Triton kernel against its torch reference, measured in the same run.

    python benchmarks/kernels.py [--quick] [--only NAME ...] [--json PATH]

On CUDA it prints a table of median times, the speedup (reference time / Triton time), the
bandwidth the Triton kernel achieved over the bytes it must move, and its error against the
reference (the run fails if a kernel disagrees). The expanded prefill kernel (mla_prefill) is
timed against torch's scaled_dot_product_attention (flash) over the same keys materialized per
head, and then the two MLA forms of a whole prefill chunk are timed against each other
(expanded: kv_b_proj GEMM + mla_prefill; absorbed: W_UK, sparse_mla over every visible key,
W_UV), the comparison inference/layers/expanded_prefill.py's rule predicts. Without a GPU it
cannot time anything useful: it runs the references and the Triton interpreter on small shapes,
checks that they agree and says that timings need a GPU. Shapes follow GLM-5 (serving.md §5,
glm5-model.md §A/§D).
"""

from __future__ import annotations

import argparse
import json
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

import torch.nn.functional as F  # noqa: E402

from kernels import fused_moe, indexer_scores, indexer_topk, mla_prefill_attention, sparse_mla_attention  # noqa: E402

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


def _prefill_inputs(T: int, H: int, dims: tuple[int, int, int], device, gen):
    """One fresh sequence of T tokens: q [T, H, nope + rope], kv [T, H, nope + v], k_pe [T, rope]."""
    nope, rope, v = dims
    q = torch.randn(T, H, nope + rope, generator=gen, device=device).to(torch.bfloat16)
    kv = torch.randn(T, H, nope + v, generator=gen, device=device).to(torch.bfloat16)
    k_pe = torch.randn(T, rope, generator=gen, device=device).to(torch.bfloat16)
    pos = torch.arange(T, device=device, dtype=torch.int32)
    return q, kv, k_pe, pos


def mla_prefill_case(T: int, H: int, dims: tuple[int, int, int], device, gen) -> Case:
    """The expanded prefill kernel vs torch's SDPA (flash on CUDA) over K/V materialized per head."""
    nope, rope, v = dims
    q, kv, k_pe, pos = _prefill_inputs(T, H, dims, device, gen)
    scale = (nope + rope) ** -0.5
    start, seq = torch.zeros(1, dtype=torch.int32, device=device), torch.zeros(T, dtype=torch.int32, device=device)

    def run(be):
        if be == "triton":
            return mla_prefill_attention(q, kv, k_pe, start, seq, pos, scale, nope, backend="triton")
        k = torch.cat([kv[..., :nope], k_pe[:, None, :].expand(T, H, rope)], dim=-1)
        qt, kt, vt = (x.transpose(0, 1) for x in (q, k, kv[..., nope:]))
        return F.scaled_dot_product_attention(qt, kt, vt, is_causal=True, scale=scale).transpose(0, 1)

    moved = T * H * (2 * (nope + rope) + 2 * (nope + v) + 2 * v) + T * rope * 2  # q, kv, out once each
    return Case("mla_prefill", f"T=S={T} H={H} qk={nope}+{rope} v={v} (vs SDPA)", run, _rel_err, 2e-2, moved)


def prefill_forms(T: int, H: int, iters: int, device, gen) -> dict:
    """ms of one fresh T-token chunk in each MLA form (GLM-5 widths, bf16, no selection)."""
    R, (nope, rope, v) = 512, (192, 64, 256)
    latent = torch.randn(T, R + rope, generator=gen, device=device).to(torch.bfloat16)
    w_kv = (torch.randn(H * (nope + v), R, generator=gen, device=device) * R**-0.5).to(torch.bfloat16)
    q, _, _, pos = _prefill_inputs(T, H, (nope, rope, v), device, gen)
    scale = (nope + rope) ** -0.5
    start, seq = torch.zeros(1, dtype=torch.int32, device=device), torch.zeros(T, dtype=torch.int32, device=device)
    w = w_kv.view(H, nope + v, R)
    slots = torch.where(pos[None, :] <= pos[:, None], pos[None, :], -1).to(torch.int32)  # every visible key

    def expanded():
        kv = F.linear(latent[:, :R], w_kv).view(T, H, nope + v)
        return mla_prefill_attention(q, kv, latent[:, R:], start, seq, pos, scale, nope, backend="triton")

    def absorbed():
        q_lat = torch.bmm(q[..., :nope].transpose(0, 1), w[:, :nope]).transpose(0, 1)  # W_UK
        out, _ = sparse_mla_attention(torch.cat([q_lat, q[..., nope:]], -1), latent, slots, scale, R, backend="triton")
        return torch.bmm(out.transpose(0, 1), w[:, nope:].transpose(1, 2))  # W_UV

    t_exp, t_abs = time_cuda_ms(expanded, iters), time_cuda_ms(absorbed, iters)
    return {"T": T, "heads": H, "expanded_ms": t_exp, "absorbed_ms": t_abs, "absorbed_over_expanded": t_abs / t_exp}


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
            mla_prefill_case(40, 2, (32, 16, 32), device, gen),
            fused_moe_case("fused_moe", 4, 8, 2, 64, 32, device, gen),
        ]
    if quick:
        return [
            *indexer_cases(1, 8, 4096, device, gen),
            *indexer_cases(64, 1, 4096, device, gen),
            sparse_mla_case(8, 64, 2048, 1 << 16, device, gen),
            mla_prefill_case(1024, 16, (192, 64, 256), device, gen),
            fused_moe_case("fused_moe_decode", 4, 256, 8, 6144, 256, device, gen),
            fused_moe_case("fused_moe_prefill", 256, 256, 8, 6144, 256, device, gen),
        ]
    return [
        *indexer_cases(1, 64, 32768, device, gen),  # decode: 64 sequences at 32K context
        *indexer_cases(512, 1, 16384, device, gen),  # a 512-token prefill chunk at 16K
        sparse_mla_case(64, 64, 2048, 1 << 20, device, gen),  # 64 decode tokens, all 64 heads (TP1)
        sparse_mla_case(64, 16, 2048, 1 << 20, device, gen),  # the same at 16 heads (TP4)
        sparse_mla_case(4, 16, 2048, 1 << 20, device, gen),  # small batch: relies on split rows
        mla_prefill_case(2048, 64, (192, 64, 256), device, gen),  # a 2048-token prompt, all 64 heads
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
    parser.add_argument("--json", type=Path, default=None, help="also write the rows here")
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
    failed, rows, forms = [], [], []
    for case in cases:
        err = case.error(case.run("triton"), case.run("torch"))
        ok = err <= case.tolerance
        failed += [] if ok else [case.name]
        row = {"name": case.name, "shape": case.shape, "err": err, "ok": ok}
        line = f"{case.name:<24} {case.shape:<46} {err:>8.1e}"
        if ON_GPU:
            t_ref = time_cuda_ms(lambda: case.run("torch"), iters)
            t_tri = time_cuda_ms(lambda: case.run("triton"), iters)
            gbps = case.bytes_moved / (t_tri * 1e-3) / 1e9
            row.update(torch_ms=t_ref, triton_ms=t_tri, speedup=t_ref / t_tri, GBps=gbps)
            line += f" {t_ref:>9.3f} {t_tri:>9.3f} {t_ref / t_tri:>7.2f}x {gbps:>7.0f} {100 * gbps / H200_HBM_GBPS:>4.0f}%"
        rows.append(row)
        print(line + ("" if ok else f"  MISMATCH (tolerance {case.tolerance:.0e})"), flush=True)
    if ON_GPU:
        print("\nspeedup = torch reference time / Triton time; GB/s over the compulsory bytes of one call;")
        print(f"%HBM against {H200_HBM_GBPS:.0f} GB/s (H200).")
        if not args.only or "prefill_forms".startswith(tuple(args.only)):
            gen = torch.Generator(device=device).manual_seed(1)
            for T in (512,) if args.quick else (512, 2048):
                forms.append(prefill_forms(T, 64, iters, device, gen))
                f = forms[-1]
                print(f"prefill_forms T=S={T} H=64: expanded {f['expanded_ms']:.3f} ms, absorbed {f['absorbed_ms']:.3f} ms "
                      f"(absorbed / expanded = {f['absorbed_over_expanded']:.2f})", flush=True)  # fmt: skip
    else:
        print("\nAll kernels agree with their references." if not failed else "")
    if args.json:
        device_name = torch.cuda.get_device_name() if ON_GPU else "cpu"
        args.json.write_text(json.dumps({"device": device_name, "rows": rows, "prefill_forms": forms}, indent=1))
    if failed:
        print(f"FAILED: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
