"""A/B timing of form ws configurations on one case, in one process (lab; docs/dag.md "Results"): each variant is a
set of ``prepare`` parameters (``tune: off``) plus, optionally, overrides of the WS kernel's constexprs (``ws_meta``'s
keys, e.g. ``FENCE_AT_SIGNAL=0``: the kernel rebuilt on the same prepared graph and buffers). Every variant passes
the gate at the SPEC scales and seeds first (``ws_dag._gate_all``), then all are timed interleaved the way the
pipeline times (``kernels.timing.time_calls``: L2 flushed, events around one call, rounds interleaved, order
alternating), so a drift of the GPU's clocks or of its neighbours hits every variant alike.

    python -m bench.dag.ws_ab --case 4 --rounds 40 --out DIR \\
        --variant base "form=ws ctas_per_sm=1 @FENCE_AT_SIGNAL=0" --variant new "form=ws ctas_per_sm=1"
    python -m bench.dag.ws_ab --case 2 3 4 12 --rounds 30 --out DIR \\
        --variant base "tuned" --variant pre4 "tuned ws_pre=4" --variant rows "tuned @LN_ROW_WARPS=0"

The word ``tuned`` in a variant stands for the case's committed dag parameters (``config/tuned/<gpu>/<case>.yaml``,
``--gpu``, default h200); the pairs after it override them. Several cases run one after another in one process.

One JSON file per case (``DIR/ws_ab_caseNN.json``, written atomically): per variant the parameters, the overrides,
registers, the gate's worst error / tolerance and pass, the median / min / p90 ms and the ratio to the first
variant's median. GPU only (Gluon has no interpreter).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time


def parse_variant(text: str, tuned: dict | None = None) -> tuple[dict, dict]:
    """``"[tuned] name=value ... @CONSTEXPR=value ..."`` -> (prepare parameters, constexpr overrides); ``tuned``
    (the word) stands for the ``tuned`` parameters given, the pairs after it override them."""
    from kernels.dag.host import parse_value
    params, over = {}, {}
    for kv in text.split():
        if kv == "tuned":
            if tuned is None:
                raise SystemExit("ws_ab: 'tuned' needs the case's committed parameters (none given)")
            params.update(tuned)
            continue
        k, sep, v = kv.partition("=")
        if not sep:
            raise SystemExit(f"ws_ab: {kv!r} is not name=value")
        if k.startswith("@"):
            over[k[1:]] = parse_value(v)
        else:
            params[k] = parse_value(v)
    return params, over


def prepare_variant(case, w, params: dict, over: dict):
    """``host.prepare`` (``tune: off``) and, with ``over``, the WS kernel rebuilt with those constexprs."""
    from kernels.dag import host
    from kernels.dag.ws_kernel import WsRunner
    p = host.prepare(case, w, **dict(params, tune="off"))
    if over:
        if p.ws is None:
            raise SystemExit("ws_ab: constexpr overrides need form=ws")
        unknown = sorted(set(over) - set(p.ws.meta))
        if unknown:
            raise SystemExit(f"ws_ab: {unknown} are not constexprs of dag_ws_fwd ({sorted(p.ws.meta)})")
        r = WsRunner(p, dict(p.ws.meta, **over), p.grid, p.ctr, p.head, p.err, p.trace)
        p.kernel = r.compile()
        p.ws = r
    return p


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--case", nargs="+", required=True, help="one or more cases, run one after another")
    ap.add_argument("--gpu", default="h200", help="the GPU type whose committed parameters 'tuned' stands for")
    ap.add_argument("--variant", nargs=2, action="append", metavar=("NAME", "SPEC"), required=True,
                    help='a name and "[tuned] param=value ... @CONSTEXPR=value ..."; the first is the baseline')
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--out", required=True)
    ap.add_argument("--margin", type=int, default=0,
                    help="then SPEC §4's margin of each variant without constexpr overrides: this many unseen inputs "
                         "at its worst gate scale (bench.dag.check_gpu.margin)")
    ap.add_argument("--margin-variants", nargs="+", metavar="NAME", help="only these variants' margin (default: all)")
    a = ap.parse_args(argv)
    from kernels import load_case
    plans = []   # every case's variants parsed before the GPU is touched: a bad spec fails at once
    for cid in a.case:
        case = load_case(cid)
        tuned = committed_params(case, a.gpu)
        variants = [(name, *parse_variant(spec, tuned)) for name, spec in a.variant]
        for name, params, _ in variants:
            check_variant(name, params)
        plans.append((case, variants))
    if a.margin:
        try:
            import omegaconf  # noqa: F401  (the margin check reads the correctness stage's config with it)
        except ImportError:
            raise SystemExit("ws_ab: --margin needs omegaconf (pip install -e . installs it; on a lent GPU carry "
                             "it as a wheel) — or leave --margin out") from None
    import torch
    if not torch.cuda.is_available():
        raise SystemExit("ws_ab: no CUDA device (form ws runs on sm_90 GPUs only)")
    for case, variants in plans:
        run_case(case, variants, a)
        torch.cuda.empty_cache()


def check_variant(name: str, params: dict) -> None:
    """``prepare``'s own checks of a variant's parameters that need no GPU (names, values, form ws's shared memory),
    so a variant the kernel cannot run is refused before the others' compiles and gates, not after them."""
    from kernels.dag import host
    try:
        o = host.check_params(params)
        if o["form"] == "ws":
            from kernels.dag.ws_kernel import check_ws_params
            check_ws_params(o)
    except ValueError as e:
        raise SystemExit(f"ws_ab: variant {name!r}: {e}") from None


def committed_params(case, gpu: str) -> dict | None:
    """The dag parameters committed for ``case`` on ``gpu`` (``config/tuned/<gpu>/<case>.yaml``), or None."""
    from kernels import tuning
    block = tuning.read_block(tuning.tuned_file(case, gpu), "dag")
    return None if block is None else dict(block["params"])


def require_committed(case, gpu: str, tool: str) -> dict:
    """``committed_params``, or ``tool``'s refusal naming the tuned file it needs."""
    params = committed_params(case, gpu)
    if params is None:
        raise SystemExit(f"{tool}: {case.name} has no committed dag parameters for {gpu} "
                         f"(config/tuned/{gpu}/{case.name}.yaml); tune the case or choose another GPU")
    return params


def run_case(case, variants: list, a) -> None:
    """Every variant (name, parameters, constexpr overrides) on ``case``: prepared and gated, then timed interleaved
    (``a.rounds``); one JSON file in ``a.out``."""
    import torch
    from bench.dag.ws_dag import _gate_all
    from kernels import make_input, make_weights
    from kernels.dag import host
    from kernels.timing import time_calls
    w = make_weights(case, device="cuda")
    refs: dict = {}
    recs, fns = [], {}
    for name, params, over in variants:
        t0 = time.perf_counter()
        p = prepare_variant(case, w, params, over)
        rec = dict(case=case.name, variant=name, params=params, constexprs=over,
                   prepare_s=round(time.perf_counter() - t0, 1), registers=p.info.get("registers"),
                   spills=p.info.get("spills"))
        rec["gate"] = _gate_all(case, w, lambda x, p=p: host.run(p, x), refs)
        runs = rec["gate"].pop("runs")
        rec["gate"]["worst_scale"] = max(runs, key=lambda r: r["max_over_tol"])["scale"]
        print(json.dumps(rec), flush=True)
        recs.append(rec)
        fns[name] = (lambda x, p=p: host.run(p, x))
    xs = [make_input(case, 1.0, s, device="cuda") for s in range(2)]
    times = time_calls(fns, xs, a.rounds, warmup=3)
    base = statistics.median(times[variants[0][0]])
    for rec in recs:
        ts = sorted(times[rec["variant"]])
        med = statistics.median(ts)
        rec.update(median_ms=round(med, 5), min_ms=round(ts[0], 5), p90_ms=round(ts[int(0.9 * (len(ts) - 1))], 5),
                   rounds=len(ts), vs_first=round(med / base, 4))
        print(json.dumps({k: rec[k] for k in ("case", "variant", "median_ms", "min_ms", "p90_ms", "vs_first")}),
              flush=True)
    write(a.out, case, recs)          # the timings kept even if a margin check below fails
    if a.margin:
        from bench.dag.check_gpu import margin
        for rec in recs:
            if not rec["constexprs"] and (not a.margin_variants or rec["variant"] in a.margin_variants):
                m = margin(case, dict(rec["params"], tune="off"), w, a.margin, rec["gate"]["worst_scale"])
                rec["margin"] = {k: m[k] for k in m if not isinstance(m[k], (list, dict))}
                print(json.dumps(dict(case=case.name, variant=rec["variant"], margin=rec["margin"])), flush=True)
        write(a.out, case, recs)


def write(out: str, case, recs: list) -> None:
    """``out/ws_ab_<case>.json`` (device, argv, the records), written atomically."""
    import torch
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, f"ws_ab_{case.name}.json")
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(dict(device=torch.cuda.get_device_name(), argv=sys.argv[1:], records=recs), f, indent=1)
    os.replace(tmp, path)


if __name__ == "__main__":
    main()
