"""Deterministic weights and inputs, bit for bit as SPEC §2: one CPU float32 generator, fixed draw order."""
from __future__ import annotations

import math
from dataclasses import dataclass, fields

import torch

from .cases import Case

LAYER_FIELDS = ("ln1_w", "ln1_b", "w_qkv", "b_qkv", "w_o", "b_o",
                "ln2_w", "ln2_b", "w_1", "b_1", "w_2", "b_2")


@dataclass
class LayerWeights:
    ln1_w: torch.Tensor  # [D]
    ln1_b: torch.Tensor  # [D]
    w_qkv: torch.Tensor  # [3D, D], rows q | k | v
    b_qkv: torch.Tensor  # [3D]
    w_o: torch.Tensor    # [D, D]
    b_o: torch.Tensor    # [D]
    ln2_w: torch.Tensor  # [D]
    ln2_b: torch.Tensor  # [D]
    w_1: torch.Tensor    # [4D, D]
    b_1: torch.Tensor    # [4D]
    w_2: torch.Tensor    # [D, 4D]
    b_2: torch.Tensor    # [D]


@dataclass
class Weights:
    layers: list[LayerWeights]
    lnf_w: torch.Tensor  # [D]
    lnf_b: torch.Tensor  # [D]

    @property
    def device(self) -> torch.device:
        return self.lnf_w.device

    def to(self, device) -> "Weights":
        return Weights(
            layers=[LayerWeights(**{f: getattr(l, f).to(device) for f in LAYER_FIELDS}) for l in self.layers],
            lnf_w=self.lnf_w.to(device), lnf_b=self.lnf_b.to(device))

    def flat(self) -> list[torch.Tensor]:
        """All tensors in SPEC draw order: 12 per layer, then lnf_w, lnf_b."""
        out = [getattr(l, f) for l in self.layers for f in LAYER_FIELDS]
        return out + [self.lnf_w, self.lnf_b]


def make_weights(case: Case, seed: int | None = None, device="cpu") -> Weights:
    """SPEC §2 weights; ``seed`` defaults to the case's weight_seed (its number)."""
    D = case.D
    g = torch.Generator().manual_seed(case.weight_seed if seed is None else seed)

    def r(*shape):
        return torch.randn(shape, generator=g)

    layers = []
    for _ in range(case.L):
        ln1_w = 1 + 0.1 * r(D); ln1_b = 0.1 * r(D)
        w_qkv = r(3 * D, D) / math.sqrt(D); b_qkv = 0.1 * r(3 * D)
        w_o = r(D, D) / math.sqrt(D); b_o = 0.1 * r(D)
        ln2_w = 1 + 0.1 * r(D); ln2_b = 0.1 * r(D)
        w_1 = r(4 * D, D) / math.sqrt(D); b_1 = 0.1 * r(4 * D)
        w_2 = r(D, 4 * D) / math.sqrt(4 * D); b_2 = 0.1 * r(D)
        layers.append(LayerWeights(ln1_w, ln1_b, w_qkv, b_qkv, w_o, b_o, ln2_w, ln2_b, w_1, b_1, w_2, b_2))
    lnf_w = 1 + 0.1 * r(D); lnf_b = 0.1 * r(D)
    w = Weights(layers, lnf_w, lnf_b)
    return w if str(device) == "cpu" else w.to(device)


def make_input(case: Case, scale: float, seed: int, device="cpu") -> torch.Tensor:
    """x: [B, S, D] float32 = randn(seed) * scale, drawn on the CPU then moved."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn((case.B, case.S, case.D), generator=g) * scale
    return x.to(device)


assert tuple(f.name for f in fields(LayerWeights)) == LAYER_FIELDS
