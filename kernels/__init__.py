"""Hopper transformer-encoder inference kernels and their peers (SPEC §1-§5).

Importable without Hydra or Snakemake. The public API::

    case = load_case(7)                       # frozen Case from config/case/case07.yaml
    w = make_weights(case, device="cuda")     # SPEC §2, bit for bit
    x = make_input(case, scale=1.0, seed=0, device="cuda")
    ref = reference_forward(case, w, x)       # naive fp32 (chunked where scores do not fit)
    v = get_variant("auto"); y = v.run(v.prepare(case, w), x)
    gate(y, ref).passed
"""
from .cases import Case, list_cases, load_case
from .gate import GateConfig, GateResult, default_gate_config, gate
from .reference import model_forward, nn_encoder, reference_forward
from .registry import Unsupported, Variant, get_variant, list_variants, register
from .weights import LayerWeights, Weights, make_input, make_weights
from . import peers  # noqa: F401  (registers the peers)
from . import families  # noqa: F401  (registers seqres, dag, hybrid, auto)

__all__ = [
    "Case", "list_cases", "load_case", "GateConfig", "GateResult", "default_gate_config", "gate", "model_forward",
    "nn_encoder",
    "reference_forward", "Unsupported", "Variant", "get_variant", "list_variants", "register",
    "LayerWeights", "Weights", "make_input", "make_weights",
]
