"""One key block of an online (streaming) softmax, the inner step of the attention kernels.

For running row maxima m, row sums l and an accumulator acc [M, V] over the key blocks seen so far,
a new block's scores [M, N] (hidden keys at -inf) and values [N, V] update them so that, after the
last block, acc / l is softmax(all scores) @ all values. m must start finite (the kernels use
-1e30): a block whose keys are all hidden then adds exp(-inf - m) = 0 instead of NaN.
"""

from __future__ import annotations

from kernels.backend import tl, triton_helper


@triton_helper
def online_softmax_step(m_i, l_i, acc, scores, values, DOT_PRECISION: tl.constexpr):
    """-> (m, l, acc) after one block; the probabilities are cast to the values' dtype for the dot."""
    m_new = tl.maximum(m_i, tl.max(scores, axis=1))
    alpha = tl.exp(m_i - m_new)
    p = tl.exp(scores - m_new[:, None])
    l_i = l_i * alpha + tl.sum(p, axis=1)
    acc = acc * alpha[:, None] + tl.dot(p.to(values.dtype), values, input_precision=DOT_PRECISION)
    return m_new, l_i, acc
