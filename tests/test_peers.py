"""Every peer of SPEC §5 passes the gate on the smoke cases (CPU), through the variant interface."""
import pytest
import torch

from conftest import SCALES, SEEDS
from kernels import gate, get_variant, list_cases, list_variants, load_case, make_input, make_weights, reference_forward

PEERS = list_variants(kind="peer")


def test_the_peers_of_the_spec_are_registered():
    expected = {"eager", "eager_sdpa", "nn"} | {
        f"compile_{m}_{p}" for m in ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
        for p in ("fp32", "tf32")}
    assert set(PEERS) == expected
    assert not get_variant("compile_default_tf32").gated_peer and get_variant("compile_default_fp32").gated_peer


@pytest.mark.parametrize("name", list_cases(smoke=True))
@pytest.mark.parametrize("peer", PEERS)
def test_peer_passes_the_gate_on_smoke_cases(peer, name):
    c = load_case(name)
    w = make_weights(c)
    v = get_variant(peer)
    p = v.prepare(c, w)
    for scale in SCALES:
        for seed in SEEDS:
            x = make_input(c, scale, seed)
            r = gate(v.run(p, x), reference_forward(c, w, x))
            assert r.passed, (peer, name, scale, seed, r)


def test_unknown_variant_names_the_valid_ones():
    with pytest.raises(KeyError, match="valid: eager"):
        get_variant("fastest")


def test_eager_reports_out_of_memory_instead_of_trying(monkeypatch):
    import kernels.peers as peers
    monkeypatch.setattr(peers, "naive_fits", lambda case, device: False)
    with pytest.raises(torch.cuda.OutOfMemoryError, match="out of memory"):
        get_variant("eager").prepare(load_case("smoke1"), make_weights(load_case("smoke1")))
