"""Fill the Triton cache with every candidate of a seqres search space for some cases, one process per case, so
that the tune stage's searches (which must run alone on the GPU: they time) then compile nothing.

    python -m bench.seqres.precompile 1 5 7 [--space seqres-winners]
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import time


def compile_case(n: int, space: str | None) -> None:
    from kernels import get_variant, load_case, make_weights
    from kernels.seqres.host import prepare_one, tune_candidates
    case = load_case(n)
    w = make_weights(case, device="cuda")
    if space == "committed":  # the one configuration a committed tuned file names (auto: any family)
        t = time.time()
        get_variant("auto").prepare(case, w)
        print(f"case {n} committed: {time.time() - t:.1f}s", flush=True)
        return
    for over, full in tune_candidates({}, space):
        t = time.time()
        try:
            prepare_one(case, w, **full)
            print(f"case {n} {over}: {time.time() - t:.1f}s", flush=True)
        except Exception as e:  # noqa: BLE001 - a candidate the case cannot run is skipped by the search too
            print(f"case {n} {over}: skipped ({type(e).__name__}: {str(e)[:120]})", flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("cases", type=int, nargs="+")
    ap.add_argument("--space", default=None, help="search space (config/search/<name>.yaml; default seqres), or "
                    "'committed': only the committed choice, through auto")
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.one:
        compile_case(a.cases[0], a.space)
        return 0
    extra = ["--space", a.space] if a.space else []
    procs = [subprocess.Popen([sys.executable, "-m", "bench.seqres.precompile", str(n), "--one", *extra])
             for n in a.cases]
    return max(p.wait() for p in procs)


if __name__ == "__main__":
    sys.exit(main())
