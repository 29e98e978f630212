"""The polynomial behind ``tl_helpers.gelu_log2poly``: a weighted minimax fit of log2 Phi(-u), u = |x|.

GELU(x) = x Phi(x) = max(x, 0) - |x| Phi(-|x|), so one polynomial q(u) ~ log2 Phi(-u) on [0, U] and one exp2
give GELU without erf, a reciprocal or a select: Horner's rule (n FMAs), one ``ex2``, one max and one FMA. The
degree-5 fit's leading coefficient is negative, so q falls without bound past U, as log2 Phi(-u) does (2^q -> 0): no
clamp (``tests/test_seqres.py`` checks the fit's GELU to 5e-6 over [-60, 60]). A degree-6 fit needs u clamped at U
(a positive leading coefficient: 10 instructions); degree 5 measured 0-2% faster (docs/seqres.md).

The fit minimises max over u of |q(u) - log2 Phi(-u)| ln2 max(u Phi(-u) / EABS, 1 / EREL): the error of q is a
relative error of Phi(-u), which GELU multiplies by u, so the weight holds GELU's absolute error near EABS where
u Phi(-u) is large and Phi's relative error near EREL in the tail (GELU of a negative x is x Phi(x): small outputs
keep a small relative error). Lawson's algorithm (iteratively reweighted least squares) on a 3001-point grid;
numpy only. Degree 5 reaches a weighted maximum of 2.8 (GELU error <= 2.8 EABS, Phi's relative error <= 2.8 EREL in
the tail); degree 6 reached 0.14. The coefficients in ``tl_helpers`` are this module's output, printed by

    python -m bench.common.gelu_fit

and ``tests/test_seqres.py`` re-runs the fit and compares them.
"""
from __future__ import annotations

import math

import numpy as np

DEGREE = 5
U_MAX = 5.5
EABS = 1e-6
EREL = 1e-3


def log2_phi_neg(u: np.ndarray) -> np.ndarray:
    """log2 Phi(-u) in float64 (0.5 erfc(u / sqrt 2); no cancellation for u >= 0)."""
    return np.array([math.log2(0.5 * math.erfc(v / math.sqrt(2.0))) for v in u])


def fit(degree: int = DEGREE, u_max: float = U_MAX, eabs: float = EABS, erel: float = EREL, iters: int = 400):
    """Coefficients of q, highest power first (``np.polyval`` order), and the weighted maximum error reached
    (1 = the bounds EABS / EREL met exactly; below 1, with room)."""
    u = np.linspace(0.0, u_max, 3001)
    f = log2_phi_neg(u)
    wt = math.log(2.0) * np.maximum(u * np.exp2(f) / eabs, 1.0 / erel)
    powers = np.arange(degree, -1, -1)
    v = (u / u_max)[:, None] ** powers[None, :]  # scaled abscissa: a well-conditioned least-squares matrix
    w = np.full_like(u, 1.0 / u.size)
    for _ in range(iters):
        sw = np.sqrt(w) * wt
        coef, *_ = np.linalg.lstsq(v * sw[:, None], f * sw, rcond=None)
        err = np.abs(v @ coef - f) * wt
        w = w * err
        w /= w.sum()
    return coef / u_max ** powers, float(err.max())


if __name__ == "__main__":
    c, e = fit()
    print(f"degree {DEGREE}, u in [0, {U_MAX}], weighted max error {e:.4f} (EABS {EABS:g}, EREL {EREL:g})")
    print(", ".join(repr(float(x)) for x in c))
