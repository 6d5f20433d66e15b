"""Triton-vs-reference tests: compiled on CUDA, interpreted on CPU (needs TRITON_INTERPRET=1)."""

from __future__ import annotations

import pytest
import torch

from kernels.backend import interpreter_ready
from tests.kernels.triton_kernels import interpreter_xor

if interpreter_ready():
    interpreter_xor.install()


@pytest.fixture(scope="session")
def device() -> torch.device:
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if dev.type == "cpu" and not interpreter_ready():
        pytest.fail("Triton kernels on CPU need TRITON_INTERPRET=1 set before triton is imported")
    return dev


@pytest.fixture
def gen() -> torch.Generator:
    return torch.Generator().manual_seed(1234)
