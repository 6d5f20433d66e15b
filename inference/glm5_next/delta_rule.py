"""The Kimi delta rule (KDA's core): a per-channel-gated delta-rule recurrence, in three forms.

Per head, with state S [Dk, Dv], log-decay g_t [Dk] (<= 0), strength beta_t, and q/k already
L2-normalized (q also scaled by Dk^-0.5):

    S_t = diag(exp(g_t)) S_{t-1};  S_t += k_t (beta_t (v_t - S_t^T k_t))^T;  o_t = S_t^T q_t

- `recurrent`: that loop, one step per token. The oracle for the chunked form, and the decode
  step (one token: one iteration, matrix ops over batch x heads).
- `chunked`: the WY / UT form (flash-linear-attention's chunk_kda, transformers' torch path).
  Inside a chunk of C tokens the recurrence becomes a unit-lower-triangular solve
  T = (I + A)^-1 with A_ij = beta_i <k_i, k_j exp(G_i - G_j)> (G the in-chunk cumulative g), and
  the chunk's outputs and final state are a handful of [C, C] / [C, D] matmuls; only the state
  hand-off between chunks is sequential (T / C iterations, never one per token).

Numerics: exp(G_i - G_j) per channel is factorised as exp(G_i - R) * exp(R - G_j) around the
chunk's middle row R, so no [C, C, Dk] tensor is built. That is safe only while the gate is
bounded: with the "safe gate" (g >= linear_lower_bound, -5 in the release) and C = 16 each factor
is at most exp(5 * 8) = 2e17, well inside fp32. Without a lower bound the decay is unbounded, and
`chunked` falls back to the explicit [C, C, Dk] pairwise decay (exact, more memory).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

# exp(MAX_EXPONENT) must stay far below fp32's max (exp(88.7)): products of two factors reach
# exp(2 * MAX_EXPONENT) on the masked (j > i) half before it is zeroed.
MAX_EXPONENT = 40.0


def chunk_size_for(lower_bound: float | None, largest: int = 64) -> int:
    """The largest power-of-two chunk (<= largest) whose half-chunk decay exp(|bound| * C/2) stays
    under exp(MAX_EXPONENT); 16 for the released bound of -5. Unbounded gates use 16 (explicit form)."""
    if lower_bound is None:
        return 16
    c = largest
    while c > 1 and abs(lower_bound) * (c // 2) > MAX_EXPONENT:
        c //= 2
    return c


def l2norm(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    # flash-linear-attention's form (x / sqrt(sum x^2 + eps)), which transformers matches.
    return x / torch.sqrt((x * x).sum(-1, keepdim=True) + eps)


def recurrent(q, k, v, g, beta, state: torch.Tensor | None = None):
    """q, k, g [B, T, H, Dk], v [B, T, H, Dv], beta [B, T, H] (fp32; q/k normalized, q scaled)
    -> (o [B, T, H, Dv], final state [B, H, Dk, Dv])."""
    b, t, h, dk = k.shape
    s = q.new_zeros(b, h, dk, v.shape[-1]) if state is None else state.float()
    out = []
    for i in range(t):  # the reference form: one iteration per token
        s = s * g[:, i].exp().unsqueeze(-1)
        kv_mem = torch.einsum("bhkv,bhk->bhv", s, k[:, i])
        delta = (v[:, i] - kv_mem) * beta[:, i].unsqueeze(-1)
        s = s + k[:, i].unsqueeze(-1) * delta.unsqueeze(-2)
        out.append(torch.einsum("bhkv,bhk->bhv", s, q[:, i]))
    return torch.stack(out, dim=1), s


def chunked(q, k, v, g, beta, state: torch.Tensor | None = None, chunk: int = 16, bounded: bool = True):
    """Same contract as `recurrent`. bounded: g is known to be >= -MAX_EXPONENT / (chunk / 2) per
    step (the safe gate), so the factorised decay is used; else the explicit pairwise decay."""
    b, t, h, dk = k.shape
    dv = v.shape[-1]
    pad = (-t) % chunk
    # [B, H, N, C, D]; padded steps have g = 0 (no decay) and beta = 0 (no write): neutral.
    def blocks(x):
        x = x.transpose(1, 2)
        x = F.pad(x, (0, 0, 0, pad)) if x.dim() == 4 else F.pad(x, (0, pad))
        return x.reshape(b, h, -1, chunk, *x.shape[3:])

    q, k, v, g, beta = (blocks(x.float()) for x in (q, k, v, g, beta))
    n = q.shape[2]
    gc = g.cumsum(-2)  # G: in-chunk cumulative log decay
    strict = torch.ones(chunk, chunk, dtype=torch.bool, device=q.device).tril(-1)
    causal = torch.ones(chunk, chunk, dtype=torch.bool, device=q.device).tril()
    kb = k * beta.unsqueeze(-1)
    if bounded:
        ref = gc[..., chunk // 2 : chunk // 2 + 1, :]
        k_out = k * (ref - gc).exp()  # k_j exp(R - G_j)
        a = (kb * (gc - ref).exp()) @ k_out.transpose(-1, -2)  # beta_i k_i exp(G_i - R) . k_j exp(R - G_j)
        qk = (q * (gc - ref).exp()) @ k_out.transpose(-1, -2)
    else:
        decay = (gc.unsqueeze(-2) - gc.unsqueeze(-3)).masked_fill(~causal[..., None], -math.inf).exp()
        a = torch.einsum("bhnik,bhnjk,bhnijk->bhnij", kb, k, decay)
        qk = torch.einsum("bhnik,bhnjk,bhnijk->bhnij", q, k, decay)
    a = a.masked_fill(~strict, 0.0)
    qk = qk.masked_fill(~causal, 0.0)
    eye = torch.eye(chunk, dtype=a.dtype, device=a.device)
    # T = (I + A)^-1 applied to [v*beta | k*beta*exp(G)] in one triangular solve.
    rhs = torch.cat([v * beta.unsqueeze(-1), kb * gc.exp()], dim=-1)
    solved = torch.linalg.solve_triangular(eye + a, rhs, upper=False, unitriangular=True)
    u, w = solved.split([dv, dk], dim=-1)
    q_decayed = q * gc.exp()
    k_tail = k * (gc[..., -1:, :] - gc).exp()  # k_j exp(G_last - G_j) <= k_j
    last_decay = gc[..., -1, :].exp().unsqueeze(-1)  # [B, H, N, Dk, 1]
    s = q.new_zeros(b, h, dk, dv) if state is None else state.float()
    out = torch.empty(b, h, n, chunk, dv, dtype=q.dtype, device=q.device)
    for i in range(n):  # one iteration per chunk: the state hand-off
        v_new = u[:, :, i] - w[:, :, i] @ s
        out[:, :, i] = q_decayed[:, :, i] @ s + qk[:, :, i] @ v_new
        s = s * last_decay[:, :, i] + k_tail[:, :, i].transpose(-1, -2) @ v_new
    out = out.reshape(b, h, n * chunk, dv)[:, :, :t].transpose(1, 2)
    return out, s
