"""Kernel family ``hybrid`` (SPEC §1, cases 8, 13, 14): library GEMMs at split (bf16x3) precision with
Triton LayerNorm/GELU/split kernels and a flash-style split-precision attention kernel."""
from ..registry import Variant, register
from .model import prepare, rebind, run

register(Variant(
    "hybrid", prepare, run, kind="ours", families=("hybrid",), rebind=rebind,
    description="cuBLAS bf16x3 (K-tripled hi/lo) GEMMs + Triton LN/GELU split kernels + flash attention "
                "with split-precision dots; precision per op and layer from config/variant/hybrid.yaml"))
