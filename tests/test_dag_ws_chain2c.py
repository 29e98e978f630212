"""``bench.dag.ws_chain``'s ``ws2c`` / ``ws2ca`` (GPU only to run): ``ws2``'s pipeline twice in one CTA, two consumer
warpgroups running two tasks at the same time, each with its own loader warp, ring and signaller warp.

On the CPU: the kernel compiles for sm_90a with twice the one-pipeline kernel's protocol (same ring depth), ptxas
neither serializes its wgmma nor spills, it fits one H200 SM, the registers are handed over as the module docstring
counts them; and the launcher runs the program's static list as the other forms do (the same grid)."""
import json
import os
import subprocess
import sys

import pytest

from bench.dag import ws_chain as W

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_COMPILE = """
import json
from bench.dag.ws_chain import _compile_ws
print(json.dumps(dict(one=_compile_ws(False, 1024, 3), two=_compile_ws(False, 1024, 3, two=True),
                      two_atomic=_compile_ws(False, 1024, 3, atomic=True, two=True))))
"""


@pytest.fixture(scope="module")
def compiled():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, "-c", _COMPILE], capture_output=True, text=True, env=env, timeout=300,
                         cwd=REPO)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_ws2c_compiles_for_sm90_as_two_pipelines(compiled):
    one, two, two_a = compiled["one"], compiled["two"], compiled["two_atomic"]
    for r in (one, two, two_a):
        assert r["wgmma_notes"] == [], r  # ptxas did not serialize the wgmma (C75xx)
        assert r["spill_stores"] == 0 and r["spill_loads"] == 0, r
        assert r["shared"] <= 232448, r  # 227 KB: one CTA per H200 SM
    # every instruction of the protocol twice: three wgmma per K step, the TMA loads, one acquire poll and one
    # release per task, the proxy fences of the consumer's stores and of the loader's acquire
    for key in ("wgmma", "tma", "acquire", "release", "proxy_fence"):
        assert two[key] == two_a[key] == 2 * one[key] > 0, (key, one, two)
    assert two["wgmma"] % 3 == 0 and two["release"] == 2 and two["acquire"] == 2, two
    # the residual epilogue: 64 x 64 fp32 over 128 threads, 8 vector atomics per consumer; none without it
    assert two["f32_adds"] == one["f32_adds"] == 0 and two_a["f32_adds"] == 16, (two, two_a)
    # 12 warps (4 + 4 + 4 x 1): 40 registers for the 1-warp group, WS2C_REGS for each consumer warpgroup
    assert one["warps"] == 8 and two["warps"] == two_a["warps"] == 12, (one, two)
    assert {40, W.WS2C_REGS.value} <= set(two["maxnreg"]), two
    assert 2 * 128 * W.WS2C_REGS.value + 128 * 40 <= 65536
    # two rings of 3 slots (four 8 KB tiles each) beside the one-pipeline kernel's one: one ring more, and one more
    # epilogue scratch and barrier set
    ring = 3 * 4 * 64 * 64 * 2
    assert ring < two["shared"] - one["shared"] < ring + 16384, (one["shared"], two["shared"])


class _Kernel:
    """Stands in for a ``@gluon.jit`` kernel: records the grid and arguments of a launch."""

    def __init__(self):
        self.calls = []

    def __getitem__(self, grid):
        def launch(*args, **kw):
            self.calls.append((grid, args, kw))
            return None
        return launch


def test_ws2c_launches_the_static_list_with_its_own_ring_depth(monkeypatch):
    two, one = _Kernel(), _Kernel()
    monkeypatch.setattr(W, "chain_ws2c", two)
    monkeypatch.setattr(W, "chain_ws", one)
    monkeypatch.setattr(W.Chain, "descs", lambda self: ("ahi", "alo", "whi", "wlo"))
    c = W.Chain(L=2, M=128, K=256, device="cpu", stages=4, stages_2c=2)
    assert "ws2c" in W.FORMS and "ws2ca" in W.FORMS
    c.reset()
    c.launch("ws2c", grid=4)
    c.launch("ws2ca", grid=4)
    c.launch("ws2")
    assert len(two.calls) == 2 and len(one.calls) == 1
    (g0, a0, k0), (g1, _, k1) = two.calls
    assert g0 == g1 == (4, ) and one.calls[0][0] == (c.TPS, )  # the grid as given (default: one per tile)
    assert k0["STAGES"] == 2 and one.calls[0][2]["STAGES"] == 4
    assert k0["ATOMIC"] is False and k1["ATOMIC"] is True
    # positional arguments after the descriptors: n_tasks, TPS, NTN, MB, M, then goal (epochs as the other forms)
    assert a0[10:15] == (c.n_tasks, c.TPS, c.NTN, c.MB, c.M) and a0[15] == c.NTN
