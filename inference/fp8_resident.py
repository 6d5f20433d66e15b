"""Which modules keep their FP8 weights resident, and the checkpoint checks that come with it.

`make_fp8_resident` swaps, on the meta-built model, every `nn.Linear` whose checkpoint weight is
FP8 for an `Fp8Linear` (same attribute name, so the state_dict names stay the checkpoint's), and
every FP8 `RoutedExperts` for `Fp8RoutedExperts`. Two FP8 tensors are still dequantized at load
(scaleout.md §2.5, "What stays unquantized"):
- `self_attn.kv_b_proj`: absorbed attention views its weight as [heads, nope + v, rank] for bmm;
- `self_attn.indexer.wk`: 128 rows that would join the input projection at a row offset that is
  not block-aligned (2624 on GLM-5), so it stays in the model dtype, as vLLM does.
Everything else that the release stores in FP8 (q_a, q_b, kv_a, o, indexer wq_b, dense and shared
MLPs, the routed experts) stays e4m3 + block scales: 734 of GLM-5.3's 753 B parameters are experts.
"""

from __future__ import annotations

import re
from typing import Callable

from torch import nn

from inference.config import ModelConfig
from inference.fp8 import scale_shape
from inference.layers.fp8_experts import Fp8RoutedExperts
from inference.layers.fp8_linear import Fp8Linear
from inference.layers.moe import RoutedExperts

DEQUANTIZED_AT_LOAD = re.compile(r"self_attn\.(kv_b_proj|indexer\.wk)$")
FP8_DTYPES = ("F8_E4M3", "F8_E5M2")


def make_fp8_resident(
    model: nn.Module, config: ModelConfig, block: tuple[int, int], mode: str, is_fp8: Callable[[str], bool]
) -> list[str]:
    """Swap modules in place (call under `torch.device("meta")`); `is_fp8(tensor_name)` says whether
    the checkpoint stores that weight in FP8. Returns the swapped module names."""
    swapped = []
    parallel = getattr(model, "parallel", None)  # sharded models: local experts, local shapes
    for name, module in list(model.named_modules()):
        if isinstance(module, nn.Linear) and module.bias is None and not DEQUANTIZED_AT_LOAD.search(name):
            if not is_fp8(f"{name}.weight"):
                continue
            new = Fp8Linear(module.in_features, module.out_features, block, mode)
        elif isinstance(module, RoutedExperts) and not isinstance(module, Fp8RoutedExperts):
            if not is_fp8(f"{name}.0.gate_proj.weight"):
                continue
            new = Fp8RoutedExperts(config, block, mode, parallel)
        else:
            continue
        parent, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent) if parent else model, child, new)
        swapped.append(name)
    return swapped


def scale_errors(names: dict[str, tuple[tuple[int, ...], str]], block: tuple[int, int]) -> list[str]:
    """names: tensor -> (shape, safetensors dtype). Every FP8 weight needs a `_scale_inv` sibling
    of shape [ceil(out/bo), ceil(in/bi)]; checked for every weight format, before anything loads."""
    errors = []
    for name, (shape, dtype) in names.items():
        if dtype not in FP8_DTYPES:
            continue
        scale = name + "_scale_inv"
        if scale not in names:
            errors.append(f"{name}: stored as {dtype} but {scale} is missing")
            continue
        want = scale_shape(shape, block) if len(shape) == 2 else None
        got = names[scale][0]
        if want is None or got != want:
            errors.append(
                f"{scale}: shape {list(got)}, expected {list(want) if want else '[rows, cols]'} for weight "
                f"{list(shape)} with {block[0]}x{block[1]} blocks"
            )
    return errors


def set_fp8_mode(model: nn.Module, mode: str) -> None:
    """Switch every FP8-resident module (and the fused FP8 weights that fuse() made) between "fp8"
    and "fp8_w8a8" without reloading (A/B runs: benchmarks/glm53_forward.py)."""
    from inference.layers.fp8_linear import RESIDENT_FORMATS, Fp8Weight

    if mode not in RESIDENT_FORMATS:
        raise ValueError(f"mode={mode!r}: expected one of {RESIDENT_FORMATS}")
    for module in model.modules():
        if isinstance(module, (Fp8Linear, Fp8RoutedExperts)):
            module.mode = mode
        for value in vars(module).values():
            if isinstance(value, Fp8Weight):
                value.mode = mode
