"""A compile-time edit of the PTX Triton 3.6 emits for the dag kernel (parameter ``reduce_init``, docs/dag.md).

A reduction across warps (``tl.sum`` over a LayerNorm row: its D columns span the four warps) exchanges the
warps' partial sums through shared memory, and Triton reads them back with an inline-asm predicated load,
``@%p ld.shared.b32 %r, [...]``, into a register nothing else defines. For the lanes whose predicate is false
the register keeps whatever it held — inside the persistent task loop, the value of the previous task — so
ptxas must keep every such register alive across the whole loop: 64 of them in the dag kernel (4 LayerNorm call
sites x 8 row chunks x 2 statistics), which took it to 255 registers and 96-164 bytes of spills.

``zero_predicated_loads`` writes ``mov.b32 %r, 0;`` in front of each such load whose destination register has no
other definition in the module. The lanes that read the zero are those whose value no result depends on (a
program that used it would be reading an undefined register), so the edit keeps the kernel's results; ptxas then
sees a definition on every path and the registers live only from the load to their last use.

Triton's cache key does not see the edit: the choice is also a constexpr of the kernel (``REDUCE_INIT``), so an
edited and an unedited binary never stand in for each other.
"""
from __future__ import annotations

import contextlib
import re

_REG = r"%(?:r|rs|rd|f|fd)\d+"
# an instruction's destination: optional predicate, opcode, then the first operand (a register or a {list})
_DEF = re.compile(rf"^\s*(?:@!?%p\d+\s+)?[a-z][\w.]*\s+(\{{[^}}]*\}}|{_REG})\s*,", re.M)
# a predicated shared-memory load (Triton emits it alone inside an inline-asm block)
_PRED_LD = re.compile(rf"^([ \t]*)@!?%p\d+\s+ld\.shared(?:\.v[24])?\.b(16|32|64)\s+(\{{[^}}]*\}}|{_REG})\s*,", re.M)
_MOV = {"16": "mov.b16", "32": "mov.b32", "64": "mov.b64"}


def _regs(operand: str) -> list[str]:
    return re.findall(_REG, operand)


def zero_predicated_loads(ptx: str) -> tuple[str, int]:
    """``ptx`` with a zeroing move in front of every predicated ``ld.shared`` whose destination registers are
    defined nowhere else; returns (the new text, the number of loads edited)."""
    defs: dict[str, int] = {}
    for m in _DEF.finditer(ptx):
        for r in _regs(m.group(1)):
            defs[r] = defs.get(r, 0) + 1
    edited = 0

    def edit(m):
        nonlocal edited
        regs = _regs(m.group(3))
        if not regs or any(defs.get(r, 0) != 1 for r in regs):
            return m.group(0)
        edited += 1
        movs = "".join(f"{m.group(1)}{_MOV[m.group(2)]} \t{r}, 0;\n" for r in regs)
        return movs + m.group(0)

    return _PRED_LD.sub(edit, ptx), edited


@contextlib.contextmanager
def ptx_reduce_init():
    """While active, every kernel Triton compiles for NVIDIA gets ``zero_predicated_loads`` on its PTX."""
    from triton import knobs
    if not hasattr(knobs.runtime, "add_stages_inspection_hook"):
        raise RuntimeError(f"ptx_passes: this Triton ({__import__('triton').__version__}) lacks "
                           "knobs.runtime.add_stages_inspection_hook (written for Triton 3.6; pyproject.toml pins it)")
    old_hook = knobs.runtime.add_stages_inspection_hook

    def hook(backend, stages, options, language, capability):
        if old_hook is not None:
            old_hook(backend, stages, options, language, capability)
        if "ptx" not in stages:
            return
        make = stages["ptx"]

        def ptx(src, metadata):
            return zero_predicated_loads(make(src, metadata))[0]
        stages["ptx"] = ptx

    knobs.runtime.add_stages_inspection_hook = hook
    try:
        yield
    finally:
        knobs.runtime.add_stages_inspection_hook = old_hook
