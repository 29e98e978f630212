"""Shared test setup: CPU only, Triton kernels through the interpreter."""
import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # before anything imports triton kernels

import pytest  # noqa: E402
import torch  # noqa: E402

SCALES = [1e-3, 1e-2, 1e-1, 1.0, 1e1, 1e2, 1e3]
SEEDS = [0, 1]
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(autouse=True)
def _deterministic_threads():
    torch.manual_seed(0)
    yield
