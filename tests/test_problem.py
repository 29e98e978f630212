"""The problem of SPEC §2-§3: cases, weights and inputs bit for bit, the reference model."""
import math

import pytest
import torch

from kernels import list_cases, load_case, make_input, make_weights, nn_encoder, reference_forward
from kernels.reference import nn_forward

SMOKE = list_cases(smoke=True)


def test_case_table_has_14_cases_and_3_smoke_cases():
    assert len(list_cases(smoke=False)) == 14 and list_cases(smoke=True) == SMOKE
    c = load_case(7)
    assert (c.name, c.family, c.B, c.S, c.D, c.H, c.L, c.causal, c.weight_seed) == \
        ("case07", "seqres", 32, 64, 384, 6, 4, True, 7)
    assert load_case("case07") is c and load_case("7") is c and c.dh == 64
    assert load_case("smoke2").weight_seed == 102 and load_case(14).family == "hybrid"


def test_unknown_case_names_the_valid_ones():
    with pytest.raises(KeyError, match="valid: case01"):
        load_case("case99")


def test_flops_halve_causal_attention():
    c = load_case(13)
    B, S, D, L = c.B, c.S, c.D, c.L
    assert c.flops == L * (2 * B * S * D * 12 * D + 2 * B * S * S * D)
    assert load_case(3).flops == 6 * (2 * 2 * 128 * 768 * 12 * 768 + 4 * 2 * 128 * 128 * 768)


def test_weights_follow_the_spec_draw_order_bit_for_bit():
    c = load_case("smoke1")
    w = make_weights(c)
    g = torch.Generator().manual_seed(101)
    D = c.D
    r = lambda *s: torch.randn(s, generator=g)  # noqa: E731
    ln1_w = 1 + 0.1 * r(D); ln1_b = 0.1 * r(D); w_qkv = r(3 * D, D) / math.sqrt(D)
    assert torch.equal(w.layers[0].ln1_w, ln1_w) and torch.equal(w.layers[0].ln1_b, ln1_b)
    assert torch.equal(w.layers[0].w_qkv, w_qkv)
    g2 = torch.Generator().manual_seed(101)
    shapes = [(D,), (D,), (3 * D, D), (3 * D,), (D, D), (D,), (D,), (D,), (4 * D, D), (4 * D,), (D, 4 * D), (D,)]
    for _ in range(c.L):
        for s in shapes:
            torch.randn(s, generator=g2)
    assert torch.equal(w.lnf_w, 1 + 0.1 * torch.randn((D,), generator=g2))
    assert torch.equal(w.lnf_b, 0.1 * torch.randn((D,), generator=g2))
    g3 = torch.Generator().manual_seed(101)
    draws = [torch.randn(s, generator=g3) for _ in range(c.L) for s in shapes]
    assert torch.equal(w.layers[1].w_2, draws[12 + 10] / math.sqrt(4 * D))  # r / math.sqrt(4 * D), exactly
    assert torch.equal(w.layers[1].b_1, 0.1 * draws[12 + 9])


def test_weights_and_inputs_are_deterministic_and_seed_dependent():
    c = load_case("smoke2")
    a, b = make_weights(c).flat(), make_weights(c).flat()
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert not torch.equal(make_weights(c, seed=5).flat()[2], a[2])
    x = make_input(c, 10.0, 3)
    assert x.dtype == torch.float32 and x.shape == (1, 32, 64)
    assert torch.equal(x, torch.randn((1, 32, 64), generator=torch.Generator().manual_seed(3)) * 10.0)
    assert not torch.equal(x, make_input(c, 10.0, 4))


@pytest.mark.parametrize("name", SMOKE)
@pytest.mark.parametrize("fast_path", [False, True])
def test_reference_equals_nn_transformer_encoder(name, fast_path):
    """SPEC §2: the model IS nn.TransformerEncoder(norm_first, gelu, ...) with these weights."""
    c = load_case(name)
    w = make_weights(c)
    enc = nn_encoder(c, w)
    for scale in (1e-3, 1.0, 1e3):
        x = make_input(c, scale, 0)
        ref = reference_forward(c, w, x)
        if fast_path:
            with torch.inference_mode():
                y = nn_forward(enc, x, c.causal)
        else:
            enc.train()  # training mode disables the fused fast path; dropout is 0
            with torch.no_grad():
                y = nn_forward(enc, x, c.causal)
            enc.eval()
        torch.testing.assert_close(y, ref, atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize("name", SMOKE)
def test_chunked_reference_equals_naive(name):
    c = load_case(name)
    w = make_weights(c)
    x = make_input(c, 1.0, 0)
    naive = reference_forward(c, w, x, chunked=False)
    for block in (5, 16, 1000):
        torch.testing.assert_close(reference_forward(c, w, x, chunked=True, block_q=block), naive,
                                   atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("causal", [True, False])
def test_chunked_attention_is_the_naive_math_bit_for_bit(causal):
    """The chunked reference's attention, block by block, gives exactly what the naive attention gives on each block of
    queries (its keys up to the block's end when causal): the same products, division, mask and softmax."""
    import math

    from kernels.reference import _attention, _attention_naive
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 37, 16, generator=g) for _ in range(3))
    for block in (5, 16, 37, 64):
        blocks = []
        for q0 in range(0, 37, block):
            q1 = min(37, q0 + block)
            end = q1 if causal else 37
            blocks.append(_attention_naive(q[:, :, q0:q1], k[:, :, :end], v[:, :, :end], causal, q0))
        assert torch.equal(_attention(q, k, v, causal, "chunked", block), torch.cat(blocks, dim=2))
    assert math.isfinite(float(_attention(q, k, v, causal, "chunked", 5).abs().max()))


def test_causal_mask_changes_the_output():
    c = load_case("smoke2")
    w = make_weights(c)
    x = make_input(c, 1.0, 0)
    from kernels.reference import model_forward
    y_c = model_forward(x, w.flat(), c.H, True)
    y_n = model_forward(x, w.flat(), c.H, False)
    assert not torch.allclose(y_c, y_n)
    x2 = x.clone(); x2[:, -1] += 1.0  # the last token must not affect earlier ones under the mask
    torch.testing.assert_close(model_forward(x2, w.flat(), c.H, True)[:, :-1], y_c[:, :-1])
