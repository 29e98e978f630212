"""Shared test setup: CPU only, Triton kernels through the interpreter."""
import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # before anything imports triton kernels

import pytest  # noqa: E402
import torch  # noqa: E402

from kernels.gate import default_gate_config  # noqa: E402

GATE = default_gate_config()  # config/gate/default.yaml: atol, rtol, scales, seeds
SCALES = list(GATE.scales)
SEEDS = list(GATE.seeds)
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(autouse=True)
def _deterministic_threads():
    torch.manual_seed(0)
    yield
