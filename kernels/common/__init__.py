"""Device helpers shared by every family (Triton ``@triton.jit`` functions, inlined at the call site)."""
from .tl_helpers import gelu_erf, layernorm_rows  # noqa: F401
