"""Choosing between a Triton kernel and its torch reference, and launching Triton kernels.

Every kernel in this package has a plain-torch reference with the same signature. The dispatchers
take ``backend``:

- ``"auto"`` (default): Triton when the tensors live on CUDA, the torch reference otherwise.
  ``HORIZON_KERNEL_BACKEND=torch|triton`` overrides "auto" for a whole process (A/B runs).
- ``"torch"``: always the reference.
- ``"triton"``: always Triton. On CPU tensors this runs the Triton *interpreter*, which is how the
  tests check the kernels without a GPU.

Triton reads ``TRITON_INTERPRET`` when ``@triton.jit`` decorates a function, i.e. at import time.
``TritonKernel`` keeps our undecorated kernel function and builds the compiled or the interpreted
version per launch from the tensors' device, so importing this package never fixes the mode. The
interpreter still needs ``TRITON_INTERPRET=1`` before triton's first import because triton's own
library functions (tl.sum, ...) are decorated then; tests/kernels runs its interpreter tests in a
subprocess for that reason.
"""

from __future__ import annotations

import os
from types import SimpleNamespace
from typing import Any, Callable, Literal

import torch

try:
    import triton
    import triton.language as tl

    HAVE_TRITON = True
except ImportError:  # pragma: no cover - triton only ships for Linux x86_64; references still work
    triton = None
    tl = SimpleNamespace(constexpr=None)  # kernel annotations only; no kernel launches without triton
    HAVE_TRITON = False

Backend = Literal["auto", "torch", "triton"]
BACKENDS: tuple[str, ...] = ("auto", "torch", "triton")
BACKEND_ENV_VAR = "HORIZON_KERNEL_BACKEND"


def resolve_backend(backend: str, device: torch.device) -> Literal["torch", "triton"]:
    """Turn a requested backend into the one that will run on ``device``."""
    if backend not in BACKENDS:
        raise ValueError(f"backend={backend!r}: expected one of {BACKENDS}")
    if backend == "auto":
        override = os.environ.get(BACKEND_ENV_VAR, "auto")
        if override not in BACKENDS:
            raise ValueError(f"{BACKEND_ENV_VAR}={override!r}: expected one of {BACKENDS}")
        backend = override
    if backend == "auto":
        return "triton" if device.type == "cuda" and HAVE_TRITON else "torch"
    if backend == "triton" and not HAVE_TRITON:
        raise RuntimeError("backend='triton' requested but triton is not installed")
    return backend  # type: ignore[return-value]


def uses_interpreter(device: torch.device) -> bool:
    """CPU tensors can only run a Triton kernel under the interpreter; so can anything when forced."""
    return device.type != "cuda" or os.environ.get("TRITON_INTERPRET") == "1"


def interpreter_ready() -> bool:
    """True when triton.language was imported under TRITON_INTERPRET=1.

    The interpreter can run our kernel functions at any time, but triton's own library functions
    (tl.sum, tl.max, ...) are decorated once at import: as compiled JITFunctions, which refuse to
    run inside the interpreter, unless the variable was set by then.
    """
    if not HAVE_TRITON:
        return False
    from triton.runtime.interpreter import InterpretedFunction

    return isinstance(tl.sum, InterpretedFunction)


class TritonKernel:
    """A Triton kernel function that runs compiled on CUDA and interpreted on CPU.

    Kernels take a final ``UPCAST: tl.constexpr`` argument: the interpreter (triton 3.x) multiplies
    bf16 ``tl.dot`` operands as raw uint16 bits, so interpreted launches upcast dot operands to fp32.
    Compiled launches keep bf16 operands for the tensor cores.
    """

    def __init__(self, fn: Callable[..., Any]):
        self.fn = fn
        self._compiled = None
        self._interpreted = None

    def launch(self, grid: tuple[int, ...], *args: Any, device: torch.device, **meta: Any) -> None:
        if not HAVE_TRITON:
            raise RuntimeError(f"{self.fn.__name__}: triton is not installed")
        if uses_interpreter(device):
            if not interpreter_ready():
                raise RuntimeError(
                    f"{self.fn.__name__}: running a Triton kernel on {device} needs the Triton interpreter, "
                    "which needs TRITON_INTERPRET=1 in the environment before triton is first imported "
                    "(or use backend='torch')"
                )
            if self._interpreted is None:
                from triton.runtime.interpreter import InterpretedFunction

                self._interpreted = InterpretedFunction(self.fn)
            self._interpreted[grid](*args, UPCAST=True, **meta)
        else:
            if self._compiled is None:
                self._compiled = triton.jit(self.fn)
            self._compiled[grid](*args, UPCAST=False, **meta)

    def compile_ahead(self, arg_types: dict[str, str], meta: dict[str, Any], arch: int = 90, divisible: tuple = ()):
        """Compile for CUDA compute capability ``arch`` without a GPU (triton ships ptxas).

        arg_types maps pointer and float arguments to triton types ("*bf16", "fp32", ...); other
        runtime arguments are taken as i32. ``divisible`` names the arguments to treat as multiples
        of 16 (bytes for pointers), as a launch specializes them when they are: only then do the
        loads vectorize and pipeline, so registers and shared memory match a real launch's.
        Returns the compiled kernel (``.metadata.shared`` is its shared memory in bytes). Catches
        compile errors and resource overflows on CPU-only CI.
        """
        from triton.backends.compiler import GPUTarget
        from triton.compiler import ASTSource
        from triton.runtime.jit import JITFunction

        fn = JITFunction(self.fn)  # not triton.jit: that returns an interpreter stub under TRITON_INTERPRET=1
        constexprs = {k: v for k, v in meta.items() if k in fn.arg_names}
        constexprs["UPCAST"] = False
        options = {k: v for k, v in meta.items() if k not in fn.arg_names}
        signature = {n: "constexpr" if n in constexprs else arg_types.get(n, "i32") for n in fn.arg_names}
        attrs = {(fn.arg_names.index(n),): [["tt.divisibility", 16]] for n in divisible}
        source = ASTSource(fn, signature, constexprs=constexprs, attrs=attrs)
        return triton.compile(source, target=GPUTarget("cuda", arch, 32), options=options)


def triton_helper(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A device function that kernels call (``x = helper(y)`` inside a kernel body).

    Compiled kernels need a JITFunction to inline; the interpreter refuses to call one, so this
    JITFunction calls the plain function when invoked directly (which only the interpreter does)."""
    if not HAVE_TRITON:
        return fn
    from triton.runtime.jit import JITFunction

    class _Helper(JITFunction):
        def __call__(self, *args: Any, **kwargs: Any) -> Any:
            return self.fn(*args, **kwargs)

    return _Helper(fn)


def dot_precision(dtype: torch.dtype) -> str:
    """fp32 inputs get exact fp32 dots (tl.dot defaults to tf32, ~1e-3 relative error); bf16/fp16
    inputs use the tensor cores either way."""
    return "ieee" if dtype == torch.float32 else "tf32"


def next_pow2(n: int) -> int:
    return 1 << max(int(n) - 1, 0).bit_length()


def cdiv(a: int, b: int) -> int:
    return -(-a // b)
