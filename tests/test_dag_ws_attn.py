"""``bench.dag.ws_attn`` (GPU only to run): the dag kernel's attention task in the warp-specialized Gluon form and
today's ``tl`` body compile for sm_90a with what they are measured with, and the probe's CPU references are right."""
import json
import math
import os
import subprocess
import sys

import pytest
import torch

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def compiled():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, "-m", "bench.dag.ws_attn", "--compile", "--forms", "tl", "ws", "wsn", "ws3"],
                         capture_output=True, text=True, env=env, timeout=600, cwd=REPO)
    assert out.returncode == 0, out.stderr[-2000:]
    return [json.loads(ln) for ln in out.stdout.strip().splitlines() if ln.startswith("{")]


def test_ws_attn_compiles_for_sm90_with_its_protocol(compiled):
    """The Gluon form: TMA loads (q, k, v hi/lo), async wgmma with the three bf16 products per q·kᵀ and per p·v (FA3
    order: block 0's q·kᵀ, then q·kᵀ of block j and p·v of block j - 1 in the loop, then the last p·v: 12 products;
    in _attn_block's order 6), mbarrier rings, the loader warp's registers handed over, no spills, wgmma not
    serialized by ptxas; ``ws`` fits two programs per SM. The ``tl`` form is today's body (cp.async, 6 products)."""
    rows = {(r["case"], r["form"]): r for r in compiled}
    assert {c for c, _ in rows} == {4, 3}
    for case in (4, 3):
        for form, products in (("ws", 12), ("ws3", 12), ("wsn", 6)):
            r = rows[(case, form)]
            assert r["products"] == products and r["wgmma"] == 4 * products and r["hgmma"] == 4 * products, r
            assert r["tma"] >= 6 and r["mbarrier_wait"] >= 3 and r["mbarrier_arrive"] >= 3, r
            assert r["mbarrier_expect"] >= 3 and r["setmaxnreg"] > 0 and 40 in r["setmaxnreg_values"], r
            assert r["spills"] == "0/0" and not r["wgmma_serialized"] and r["cp_async"] == 0, r
            assert r["shared"] <= 232448, r  # one H200 SM
        ws = rows[(case, "ws")]
        assert ws["registers"] <= 128 and 2 * (ws["shared"] + 1024) <= 233472, ws  # two programs per SM
        t = rows[(case, "tl")]
        assert t["products"] == 6 and t["wgmma"] > 0 and t["cp_async"] > 0 and t["tma"] == 0, t
        assert t["spills"] == "0/0", t
    traced = [r for r in compiled if r["form"] == "ws+trace"]
    assert traced and traced[0]["globaltimer"] >= 4, traced  # the four stamps per task


@pytest.mark.parametrize("causal", [False, True])
def test_ws_attn_reference_is_sdpa_of_the_split_operands(causal):
    """The probe's float64 reference is softmax(q kᵀ / √dh) v of q = hi + lo, …, in the merged-heads layout the
    kernel stores (torch's SDPA in float64), and the CPU emulation of the kernel's arithmetic is fp32-grade."""
    from bench.dag.ws_attn import emulate, make_qkv, reference
    B, H, S, DH = 2, 3, 128, 64
    hi, lo = make_qkv(B, S, H, DH, seed=3)
    assert hi.shape == (3, B, H, S, DH) and hi.dtype == torch.bfloat16 and lo.dtype == torch.bfloat16
    x = hi.double() + lo.double()
    assert float((x - (hi.float() + lo.float()).double()).abs().max()) == 0.0  # the split is exact in fp32
    ref = reference(hi, lo, causal)
    sdpa = torch.nn.functional.scaled_dot_product_attention(x[0], x[1], x[2], is_causal=causal)
    assert ref.shape == (B * S, H * DH)
    torch.testing.assert_close(ref, sdpa.permute(0, 2, 1, 3).reshape(B * S, H * DH), rtol=1e-12, atol=1e-12)
    # the merged-heads layout: row b·S + s, columns h·dh … h·dh + dh - 1
    torch.testing.assert_close(ref[1 * S + 5, 2 * DH:3 * DH], sdpa[1, 2, 5])
    emu = emulate(hi, lo, causal)
    rel = float((emu - ref).abs().max() / ref.abs().max())
    assert rel < 5e-5, rel
    if causal:  # the first query attends to the first key only
        torch.testing.assert_close(ref[0], x[2, 0, :, 0].reshape(-1), rtol=1e-12, atol=1e-12)


def test_ws_attn_json_rows_merge_across_processes(tmp_path):
    """One process per form: each merges its rows into ws_attn.json (same case, form and grid replaced)."""
    from bench.dag.ws_attn import _write
    _write(str(tmp_path), [dict(case=2, form="tl", grid_arg=0, us_per_launch=9.0)], "dev")
    _write(str(tmp_path), [dict(case=2, form="ws", grid_arg=0, us_per_launch=5.0)], "dev")
    _write(str(tmp_path), [dict(case=2, form="tl", grid_arg=0, us_per_launch=8.0)], "dev")
    rows = json.loads((tmp_path / "ws_attn.json").read_text())["rows"]
    assert sorted((r["form"], r["us_per_launch"]) for r in rows) == [("tl", 8.0), ("ws", 5.0)]
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]


def test_ws_attn_qk_scale_and_task_order():
    """Task t runs query block NQB - 1 - t // (B·H) (longest first) of head t % (B·H), as both kernels decode it;
    qk_scale is the kernel's log2(e)/√dh."""
    from bench.dag.ws_attn import BLOCK, case_shape
    sh = case_shape(4)
    assert (sh["B"], sh["S"], sh["H"], sh["DH"], sh["causal"]) == (1, 512, 8, 64, True)
    nqb, bh = sh["S"] // BLOCK, sh["B"] * sh["H"]
    order = [(nqb - 1 - t // bh, t % bh) for t in range(nqb * bh)]
    assert order[0] == (nqb - 1, 0) and order[-1] == (0, bh - 1) and len(set(order)) == nqb * bh
    assert math.isclose(math.log2(math.e) / math.sqrt(64), 0.18033688011112042)


def test_ws_attn_trace_stats_per_query_block():
    """The traced split: a task's time from the consumer's start to its stores, per query block (task t has query
    block NQB - 1 - t // (B·H)), and the span from the first issue to the last store."""
    from types import SimpleNamespace
    from bench.dag.ws_attn import _trace_stats
    p = SimpleNamespace(S=256, B=1, H=2)
    tr = torch.zeros(8, 4, dtype=torch.int64)
    for t in range(8):
        qb = 3 - t // 2
        tr[t] = torch.tensor([100 * t, 100 * t + 50, 100 * t + 300, 100 * t + 50 + 1000 * (qb + 1)])
    st = _trace_stats(p, tr)
    assert st["per_query_block"]["3"] == dict(median=4.0, max=4.0) and st["per_query_block"]["0"]["max"] == 1.0
    assert st["task_max_us"] == 4.0 and st["first_data_median_us"] == 0.25
    assert st["span_us"] == 4.15  # task 1 (query block 3) stores last
