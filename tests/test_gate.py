"""The gate of SPEC §4: |out-ref| <= atol OR |out-ref| <= rtol*|ref|, element by element."""
import torch

from kernels import gate


def test_or_rule_absolute_or_relative():
    ref = torch.tensor([0.0, 1.0, 100.0, -50.0])
    # 0.0019 abs on a zero ref (abs ok); 0.019 on 1.0 (rel ok); 1.9 on 100 (rel ok); 0.9 on -50 (rel ok)
    assert gate(ref + torch.tensor([0.0019, 0.019, 1.9, 0.9]), ref).passed
    r = gate(ref + torch.tensor([0.0021, 0.0, 0.0, 0.0]), ref)  # 0.0021 on 0: neither
    assert not r.passed and r.frac_failing == 0.25 and r.worst_index == [0]
    assert not gate(ref + torch.tensor([0.0, 0.021, 0.0, 0.0]), ref).passed  # 2.1% of 1.0 and > atol
    assert gate(ref, ref).max_abs == 0.0


def test_tolerances_are_parameters():
    ref = torch.ones(3)
    assert not gate(ref + 0.05, ref).passed
    assert gate(ref + 0.05, ref, atol=0.1).passed
    assert gate(ref + 0.05, ref, rtol=0.06).passed


def test_nan_and_inf_fail():
    ref = torch.ones(4)
    for bad in (float("nan"), float("inf"), -float("inf")):
        out = ref.clone(); out[2] = bad
        r = gate(out, ref)
        assert not r.passed and "non-finite" in r.reason and r.worst_index == [2]


def test_shape_and_dtype_mismatch_fail():
    ref = torch.ones(2, 3)
    assert not gate(torch.ones(3, 2), ref).passed
    assert not gate(torch.ones(6), ref).passed
    r = gate(ref.double(), ref)
    assert not r.passed and "dtype" in r.reason
    assert not gate(ref.half(), ref).passed
    assert not gate(None, ref).passed


def test_a_zeroed_output_fails():
    g = torch.Generator().manual_seed(0)
    ref = torch.randn(4, 16, 32, generator=g)
    r = gate(torch.zeros_like(ref), ref)
    assert not r.passed and r.frac_failing > 0.9


def test_max_over_tol_is_the_heat_map_quantity():
    ref = torch.tensor([1.0, 0.0])
    r = gate(ref + torch.tensor([0.01, 0.001]), ref)
    assert abs(r.max_over_tol - 0.5) < 1e-6 and r.passed
