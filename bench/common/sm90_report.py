"""Resource report of a kernel compiled for sm_90 without a GPU (``triton.compile`` with an explicit target): the
bundled ``ptxas -v`` (registers, spills) and whether ptxas serialized the wgmma instructions (its performance notes
C7510 / C7514 / C7515 …: a call inside a pipeline stage, an accumulator read or defined by another instruction before
its wait; each serializes every wgmma of the function). Used by ``bench/seqres/aot_check.py``,
``bench/dag/aot_check.py`` and the Gluon probes of ``bench/dag``."""
from __future__ import annotations

import os
import re
import subprocess
import tempfile

import triton


def ptxas_verbose(ptx: str, arch: int = 90) -> str:
    """``ptxas -v`` output (stdout + stderr) for ``ptx``."""
    ptxas = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "ptxas")
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "k.ptx")
        with open(src, "w") as f:
            f.write(ptx)
        out = subprocess.run([ptxas, "-v", f"-arch=sm_{arch}a", src, "-o", os.path.join(d, "k.cubin")],
                             capture_output=True, text=True)
    return out.stdout + out.stderr


def serialization_notes(ptxas_text: str) -> list[str]:
    """The codes of ptxas's notes that serialized the wgmma (``(C75xx) Potential Performance Loss: wgmma.mma_async
    instructions are serialized due to …``), sorted; [] when none."""
    return sorted(set(re.findall(r"\((C\d{4})\)[^\n]*wgmma[^\n]*serialized", ptxas_text)))


def compile_gluon(fn, sig: dict, constexprs: dict, aligned=(), **options):
    """Gluon kernel ``fn`` compiled for sm_90a without a GPU: ``sig`` the runtime arguments' types by name (a
    descriptor's ``mangle_type``, ``*bf16``, ``i32`` …), ``constexprs`` the constexpr values by name, ``aligned`` the
    arguments stated 16-divisible (``tt.divisibility``), ``options`` ``triton.compile``'s (num_warps, maxnreg …).
    Returns Triton's CompiledKernel (``asm["ptx"]``, ``metadata``; ``report`` reads its resources)."""
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource
    names = list(fn.arg_names)
    full = dict(sig, **{k: "constexpr" for k in constexprs})
    full = {n: full[n] for n in names if n in full}
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in aligned}
    src = GluonASTSource(fn, full, constexprs={(names.index(k),): v for k, v in constexprs.items()},
                         attrs=attrs or None)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=options)


def report(kernel) -> dict:
    """registers, spill store/load bytes, shared memory, wgmma present / serialized, of Triton's compiled kernel."""
    ptx = kernel.asm.get("ptx", "")
    txt = ptxas_verbose(ptx, kernel.metadata.target.arch)
    regs = re.search(r"Used (\d+) registers", txt)
    st = re.search(r"(\d+) bytes spill stores", txt)
    ld = re.search(r"(\d+) bytes spill loads", txt)
    return dict(registers=int(regs.group(1)) if regs else -1, spill_stores=int(st.group(1)) if st else -1,
                spill_loads=int(ld.group(1)) if ld else -1, shared=kernel.metadata.shared,
                wgmma=len(re.findall(r"wgmma\.mma_async", ptx)), mma_sync="mma.sync" in ptx,
                wgmma_serialized=bool(serialization_notes(txt)), wgmma_notes=serialization_notes(txt))
