"""The gated speedup report (SPEC §7): reads result JSONs only, never runs a kernel.

    python -m workflow.report --gpu h200 --correctness-gpu h100_mig47 [--ncu-gpu h100_96] [--root outputs]
                              [--cases ...] [--variants ...] [--out-dir outputs/report/h200] [--strict]

Timing results come from ``<root>/timing/<gpu>/``, gate verdicts from ``<root>/correctness/<correctness-gpu>/``
(a peer whose gate fails is not "gated", whatever its timing says), Nsight Compute summaries from
``<root>/ncu/<ncu-gpu>/``. Writes ``summary.csv``, ``report.md``, ``report.html`` and the figures
(``speedup_bars.png``, ``time_per_case.png``, ``error_heatmap.png``, ``roofline.png``) to ``--out-dir``.

Definitions (per case, on the timing GPU):
  usable            the correctness JSON says passed, and the timing JSON has status ok and a passing
                    post-timing check
  vs eager          eager's median / this median (eager must have a time: an OOM eager excludes the case)
  vs compile        compile_default_fp32's median / this median
  vs best compile   the fastest *usable* compile preset whose variant counts as a gated peer (TF32 presets
                    never do)
  vs best peer      the fastest usable gated peer of any kind (eager, eager_sdpa, nn, compile_*_fp32, ...)
  headline          geometric means of auto's speedups over the cases where auto is usable and the
                    baseline exists; every other case is listed as an exclusion with its reason
  % of ceiling      TFLOP/s over the binding roof min(AI x HBM, max(fp32, bf16/3)): bf16/3 is the rate of
                    fp32-accurate split-precision tensor-core math, the fastest compute that can pass the gate
"""
from __future__ import annotations

import argparse
import html
import json
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

HEADLINE_VARIANT = "auto"
NOISY_SPREAD = 0.25  # a timing whose p20-p80 spread exceeds this fraction of its median is noted as noisy
EAGER = "eager"
COMPILE_DEFAULT = "compile_default_fp32"
COMPARISONS = {  # column suffix -> (label, baseline column holding the baseline's name or time)
    "eager": "eager",
    "compile_default": "torch.compile default (fp32)",
    "best_compile": "fastest gated compile preset",
    "best_peer": "fastest gated peer",
}
REPORT_FILES = ("summary.csv", "report.md", "report.html", "speedup_bars.png", "time_per_case.png",
                "error_heatmap.png", "roofline.png")


# ---------------------------------------------------------------- loading


def load_json(path: Path, stage: str | None = None, **expect) -> dict | None:
    """The result record at ``path``, validated against its stage's schema (``workflow/schemas.py``; ``stage``
    default: the path's stage folder) and against where it lies (``expect``: gpu, case, variant, tag). None when
    absent; an invalid file (unreadable, truncated, not a record, failing its schema, another run's) becomes a
    marker ``{"status": "invalid", "passed": False, "reason": ...}``: listed, never counted."""
    from .schemas import InvalidResult, check_file
    path = Path(path)
    stage = stage or path.parents[2].name
    try:
        return check_file(path, stage, **expect)
    except FileNotFoundError:
        return None
    except InvalidResult as e:
        return {"status": "invalid", "passed": False, "reason": f"invalid result file ({path.name}): {e}",
                "invalid": True}


def job_log_error(root, stage: str, gpu: str, case: str, variant: str) -> str:
    """Why a job left no result, from its log (``<root>/logs/<stage>/<gpu>/<case>/<variant>.log``, where the
    workflow writes it): its last ``error:`` / ``...Error:`` line, else its last line; "" without a log."""
    log = Path(root) / "logs" / stage / gpu / case / f"{variant}.log"
    try:
        lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    if not lines:
        return ""
    errs = [ln for ln in lines if ln.startswith("error:") or "Error:" in ln or "Error " in ln]
    return f"job failed: {(errs or lines)[-1][:240]} (log {log})"


def discover(root: Path, stage: str, gpu: str) -> tuple[list[str], list[str]]:
    """Cases and variants that have a result under <root>/<stage>/<gpu>/<case>/<variant>.json."""
    files = sorted((root / stage / gpu).glob("*/*.json"))
    return sorted({p.parent.name for p in files}), sorted({p.stem for p in files})


def default_variant_info(names: list[str]) -> dict[str, dict]:
    """kind / gated_peer per variant from the kernels registry (via each config's impl); where the registry
    cannot be imported: compile_*/eager*/nn are peers, *_tf32 are not gated."""
    info = {}
    try:
        import yaml

        from kernels import get_variant
        cfg_dir = Path(__file__).resolve().parent.parent / "config" / "variant"
        for n in names:
            p = cfg_dir / f"{n}.yaml"
            impl = (yaml.safe_load(p.read_text()) or {}).get("impl", n) if p.exists() else n
            try:
                v = get_variant(impl)
                info[n] = {"impl": impl, "kind": v.kind, "gated_peer": bool(v.gated_peer and v.kind == "peer")}
            except KeyError:
                pass
    except Exception:  # noqa: BLE001 - the report must work without torch
        pass
    for n in names:
        if n not in info:
            peer = n in ("eager", "eager_sdpa", "nn") or n.startswith("compile_")
            info[n] = {"impl": n, "kind": "peer" if peer else "ours", "gated_peer": peer and not n.endswith("_tf32")}
    return info


def ceilings_of(gpu: str) -> dict:
    import yaml
    p = Path(__file__).resolve().parent.parent / "config" / "gpu" / f"{gpu}.yaml"
    return (yaml.safe_load(p.read_text()) or {}).get("ceilings", {}) if p.exists() else {}


@dataclass
class Results:
    """Everything the report reads, keyed by (case, variant)."""
    cases: list[str]
    variants: list[str]
    correctness: dict = field(default_factory=dict)
    timing: dict = field(default_factory=dict)
    ncu: dict = field(default_factory=dict)
    missing: list = field(default_factory=list)   # (stage, case, variant, path)
    invalid: list = field(default_factory=list)   # (stage, case, variant, path, reason): not counted
    why_missing: dict = field(default_factory=dict)  # (stage, case, variant) -> the failed job's error (its log)


def load_results(root, gpu: str, correctness_gpu: str, ncu_gpu: str | None = None,
                 cases: list[str] | None = None, variants: list[str] | None = None, tag: str | None = None) -> Results:
    """Every result of ``cases`` x ``variants``, validated (``load_json``); ``tag``: the run's tag ("" for the
    default results), a record of another tag is invalid (None: not checked)."""
    root = Path(root)
    if not cases or not variants:
        c1, v1 = discover(root, "timing", gpu)
        c2, v2 = discover(root, "correctness", correctness_gpu)
        cases = cases or sorted(set(c1) | set(c2))
        variants = variants or sorted(set(v1) | set(v2))
    res = Results(list(cases), list(variants))
    for c in cases:
        for v in variants:
            for stage, g, store in (("correctness", correctness_gpu, res.correctness), ("timing", gpu, res.timing),
                                    ("ncu", ncu_gpu, res.ncu)):
                if g is None:
                    continue
                p = root / stage / g / c / f"{v}.json"
                d = load_json(p, stage, gpu=g, case=c, variant=v, tag=tag)
                if d is None:
                    if stage != "ncu":
                        res.missing.append((stage, c, v, str(p)))
                        res.why_missing[(stage, c, v)] = job_log_error(root, stage, g, c, v)
                    continue
                if d.get("invalid"):
                    res.invalid.append((stage, c, v, str(p), d["reason"]))
                store[(c, v)] = d
    return res


# ---------------------------------------------------------------- the summary table


def _status(d: dict | None) -> str:
    if d is None:
        return "missing"
    return str(d.get("status", "error"))


def gate_verdict(d: dict | None) -> str:
    """pass | fail | oom | unsupported | error | missing, from a correctness JSON (``passed`` includes the
    margin check where it ran: a variant whose margin check fails is failing)."""
    s = _status(d)
    if s != "ok":
        return s
    return "pass" if d.get("passed") else "fail"


def margin_of(d: dict | None) -> dict:
    """The margin check of a correctness JSON (SPEC §4), {} where it did not run."""
    m = (d or {}).get("margin") or {}
    return m if m.get("passed") is not None else {}


def binding_ceiling(ai: float, ceilings: dict) -> tuple[str, float]:
    """(name, TFLOP/s) of the roof that binds at arithmetic intensity ``ai`` (flop/byte)."""
    fp32 = float(ceilings.get("fp32_tflops", float("nan")))
    bf16_3 = float(ceilings.get("bf16_tflops", float("nan"))) / 3
    compute = ("bf16/3", bf16_3) if bf16_3 >= fp32 else ("fp32", fp32)
    mem = ai * float(ceilings.get("hbm_tbps", float("nan")))  # TB/s x flop/B = TFLOP/s
    return ("HBM", mem) if mem < compute[1] else compute


def build_summary(res: Results, info: dict[str, dict], ceilings: dict) -> pd.DataFrame:
    rows = []
    for c in res.cases:
        for v in res.variants:
            cd, td = res.correctness.get((c, v)), res.timing.get((c, v))
            vi = info.get(v, {"kind": "ours", "gated_peer": False})
            gate = gate_verdict(cd)
            worst = (cd or {}).get("worst") or {}
            margin = margin_of(cd)
            t_status = _status(td)
            post = (td or {}).get("passed_post_check")
            timed = t_status == "ok" and td.get("median_ms") is not None
            row = {
                "case": c, "variant": v, "kind": vi.get("kind"), "gated_peer": bool(vi.get("gated_peer")),
                "gate": gate, "worst_scale": worst.get("scale"), "worst_seed": worst.get("seed"),
                "worst_max_abs": worst.get("max_abs"), "worst_over_tol": worst.get("max_over_tol"),
                "margin_over_tol": margin.get("max_over_tol"), "margin_p99": margin.get("p99_over_tol"),
                "margin_inputs": margin.get("n_inputs"),
                "timing_status": t_status, "post_check": post,
                "median_ms": td.get("median_ms") if timed else None,
                "p20_ms": td.get("p20_ms") if timed else None,
                "p80_ms": td.get("p80_ms") if timed else None,
                "anchor_ratio": td.get("anchor_ratio") if timed else None,
                "tflops": td.get("tflops") if timed else None,
                "gbps": td.get("gbps") if timed else None,
            }
            row["usable"] = bool(gate == "pass" and timed and post is not False)
            reasons = []
            for stage, d in (("correctness", cd), ("timing", td)):
                if d is None:
                    why = res.why_missing.get((stage, c, v))
                    reasons.append(f"missing {stage} result" + (f" ({why})" if why else ""))
                elif _status(d) != "ok":
                    reasons.append(f"{stage} {_status(d)}: {str(d.get('reason', ''))[:160]}")
            gate_only = (cd or {}).get("gate_passed", None)
            if gate == "fail" and margin and not margin.get("passed") and gate_only is not False:
                mw = margin.get("worst") or {}
                reasons.append(f"margin check failed: worst {_fmt(margin.get('max_over_tol'))} x tolerance > "
                               f"{_fmt(margin.get('bound'))} over {margin.get('n_inputs')} inputs (scale "
                               f"{mw.get('scale')}, input seed {mw.get('input_seed')}, weight seed {mw.get('weight_seed')})")
            elif gate == "fail":
                reasons.append(f"gate failed at scale {worst.get('scale')} seed {worst.get('seed')} "
                               f"(max error {_fmt(worst.get('max_over_tol'))} x tolerance)")
            elif gate == "pass" and vi.get("kind") == "ours" and not margin:
                reasons.append("margin check not run (SPEC §4)")
            if post is False:
                reasons.append("timed output failed the post-timing check")
            if timed:
                reasons += [f"timing flag: {f}" for f in td.get("flags") or []]
                med, p20, p80 = td.get("median_ms"), td.get("p20_ms"), td.get("p80_ms")
                if med and p20 is not None and p80 is not None and (p80 - p20) > NOISY_SPREAD * med:
                    reasons.append(f"noisy timing: p20-p80 {_fmt(p20)}-{_fmt(p80)} ms is "
                                   f"{100 * (p80 - p20) / med:.0f}% of the median (fastest call "
                                   f"{_fmt(td.get('min_ms'))} ms)")
            row["note"] = "; ".join(reasons)
            rows.append(row)
    df = pd.DataFrame(rows)
    if df.empty:
        return df
    # arithmetic intensity per case (flops / min bytes = 1000 * TFLOP/s / GB/s), from any timed row
    ai = {}
    for c, g in df.groupby("case"):
        g = g.dropna(subset=["tflops", "gbps"])
        g = g[g["gbps"] > 0]
        if len(g):
            ai[c] = 1000.0 * float(g.iloc[0]["tflops"]) / float(g.iloc[0]["gbps"])
    df["intensity"] = df["case"].map(ai)
    roofs = [binding_ceiling(a, ceilings) if a == a and a is not None else (None, None) for a in df["intensity"]]
    df["ceiling"] = [r[0] for r in roofs]
    df["ceiling_tflops"] = [r[1] for r in roofs]
    df["pct_of_ceiling"] = 100.0 * df["tflops"].astype(float) / df["ceiling_tflops"].astype(float)
    # baselines per case
    for col in ("eager", "compile_default", "best_compile", "best_peer"):
        df[f"baseline_{col}"] = None
        df[f"baseline_{col}_ms"] = float("nan")
    for c, g in df.groupby("case", sort=False):
        idx = g.index
        base = {}
        for col, name in (("eager", EAGER), ("compile_default", COMPILE_DEFAULT)):
            r = g[g["variant"] == name]
            if len(r) and pd.notna(r.iloc[0]["median_ms"]):
                base[col] = (name, float(r.iloc[0]["median_ms"]))
        gated = g[g["usable"] & g["gated_peer"] & (g["kind"] == "peer")]
        comp = gated[gated["variant"].str.startswith("compile_")]
        for col, pool in (("best_compile", comp), ("best_peer", gated)):
            if len(pool):
                r = pool.loc[pool["median_ms"].astype(float).idxmin()]
                base[col] = (r["variant"], float(r["median_ms"]))
        for col, (name, ms) in base.items():
            df.loc[idx, f"baseline_{col}"] = name
            df.loc[idx, f"baseline_{col}_ms"] = ms
    for col in COMPARISONS:
        df[f"speedup_vs_{col}"] = df[f"baseline_{col}_ms"].astype(float) / df["median_ms"].astype(float)
    lead = ["case", "variant", "kind", "gate", "worst_scale", "worst_seed", "worst_over_tol", "margin_over_tol",
            "median_ms",
            "p20_ms", "p80_ms", "speedup_vs_eager", "speedup_vs_compile_default", "speedup_vs_best_compile",
            "baseline_best_compile", "speedup_vs_best_peer", "baseline_best_peer", "anchor_ratio", "tflops",
            "gbps", "intensity", "ceiling", "pct_of_ceiling", "usable"]
    return df[lead + [c for c in df.columns if c not in lead]]


# ---------------------------------------------------------------- headline


def _baseline_reason(res: Results, g: pd.DataFrame, col: str) -> str:
    """Why case ``g`` has no baseline for comparison ``col``."""
    if col in ("eager", "compile_default"):
        name = EAGER if col == "eager" else COMPILE_DEFAULT
        r = g[g["variant"] == name]
        if not len(r):
            return f"{name} not in this run's variants"
        st = r.iloc[0]["timing_status"]
        if st == "missing":
            return f"missing result ({name} timing)"
        if st == "oom":
            return f"peer OOM ({name})"
        return f"{name} timing {st}"
    pool = g[(g["kind"] == "peer") & g["gated_peer"]]
    if col == "best_compile":
        pool = pool[pool["variant"].str.startswith("compile_")]
    if not len(pool):
        return "no gated " + ("compile preset" if col == "best_compile" else "peer") + " in this run"
    return "no gated " + ("compile preset" if col == "best_compile" else "peer") + " passed and timed (" + \
        ", ".join(f"{r.variant}: {r.gate if r.gate != 'pass' else 'timing ' + r.timing_status}"
                  for r in pool.itertuples()) + ")"


def headline(df: pd.DataFrame, res: Results, variant: str = HEADLINE_VARIANT) -> dict:
    """Geomean speedups of ``variant`` per comparison over the cases where it is usable and the baseline
    exists; ``exclusions`` lists (comparison, case, reason) for every case left out."""
    out = {"variant": variant, "geomean": {c: None for c in COMPARISONS}, "n_cases": {c: 0 for c in COMPARISONS},
           "cases": {c: [] for c in COMPARISONS}, "exclusions": []}
    mine = df[df["variant"] == variant]
    if not len(mine):
        out["exclusions"].append(("all", "-", f"{variant} is not in this run's variants"))
        return out
    for col in COMPARISONS:
        vals, used = [], []
        for r in mine.itertuples():
            if not r.usable:
                continue
            s = getattr(r, f"speedup_vs_{col}")
            if s is None or not s == s:
                out["exclusions"].append((col, r.case, _baseline_reason(res, df[df["case"] == r.case], col)))
                continue
            vals.append(float(s))
            used.append(r.case)
        out["geomean"][col] = math.exp(sum(map(math.log, vals)) / len(vals)) if vals else None
        out["n_cases"][col] = len(vals)
        out["cases"][col] = used
    for r in mine.itertuples():  # auto itself not usable: excluded from every comparison
        if not r.usable:
            if r.gate == "fail" and str(r.note).startswith("margin check failed"):
                why = f"{variant}: {r.note.split(';')[0]}"
            elif r.gate == "fail":
                why = f"gate failed ({variant} worst at scale {r.worst_scale} seed {r.worst_seed}, " \
                      f"{_fmt(r.worst_over_tol)} x tolerance)"
            elif r.gate == "missing" or r.timing_status == "missing":
                stage = "correctness" if r.gate == "missing" else "timing"
                failed = res.why_missing.get((stage, r.case, variant))
                why = f"missing result ({variant} {stage})" + (f": {failed}" if failed else "")
            elif r.gate != "pass":
                why = f"{variant} correctness {r.gate}: {r.note}"
            else:
                why = f"{variant} timing {r.timing_status}" + (": " + r.note if r.note else "")
            out["exclusions"].append(("all", r.case, why))
    return out


# ---------------------------------------------------------------- figures


def _fmt(x, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and not x == x):
        return "-"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, (int, float)):
        return f"{x:.{digits}g}"
    return str(x)


def _plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _empty(ax, msg):
    ax.text(0.5, 0.5, msg, ha="center", va="center", transform=ax.transAxes)
    ax.set_axis_off()


def plot_speedup_bars(df: pd.DataFrame, path: Path, variant: str = HEADLINE_VARIANT) -> None:
    plt = _plt()
    mine = df[df["variant"] == variant]
    fig, ax = plt.subplots(figsize=(max(6, 1.0 * len(mine) + 2), 4))
    cols = list(COMPARISONS)
    vals = mine[[f"speedup_vs_{c}" for c in cols]].astype(float)
    if not len(mine) or vals.isna().all().all():
        _empty(ax, f"no timed {variant} results")
    else:
        w = 0.8 / len(cols)
        x = range(len(mine))
        for i, c in enumerate(cols):
            ys = vals[f"speedup_vs_{c}"].tolist()
            bars = ax.bar([xi + (i - (len(cols) - 1) / 2) * w for xi in x], [y if y == y else 0 for y in ys],
                          w, label=f"vs {COMPARISONS[c]}")
            for b, y, ok in zip(bars, ys, mine["usable"]):
                if not ok:
                    b.set_hatch("//")
                    b.set_alpha(0.4)
        ax.set_yscale("log")
        ax.axhline(1.0, color="k", lw=0.8)
        ax.set_xticks(list(x), mine["case"].tolist(), rotation=45, ha="right")
        ax.set_ylabel(f"speedup of {variant} (x, log)")
        ax.set_title(f"{variant}: speedup per case (hatched: fails the gate)")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_time_per_case(df: pd.DataFrame, path: Path) -> None:
    plt = _plt()
    cases = list(dict.fromkeys(df["case"]))
    fig, ax = plt.subplots(figsize=(max(6, 0.8 * len(cases) + 3), 4.5))
    timed = df.dropna(subset=["median_ms"])
    if not len(timed):
        _empty(ax, "no timing results")
    else:
        markers = "osD^v<>ph*XP8H"
        nv = max(1, df["variant"].nunique())
        for i, (v, g) in enumerate(df.groupby("variant", sort=False)):
            g = g.dropna(subset=["median_ms"])
            if not len(g):
                continue
            xs = [cases.index(c) + 0.5 * (i / nv - 0.5) for c in g["case"]]
            m = markers[i % len(markers)]
            ok = g["usable"].tolist()
            line, = ax.plot([x for x, o in zip(xs, ok) if o], g["median_ms"][g["usable"]], m, label=v, ls="none")
            ax.plot([x for x, o in zip(xs, ok) if not o], g["median_ms"][~g["usable"]], m, ls="none",
                    mfc="none", color=line.get_color())
        ax.set_yscale("log")
        ax.set_xticks(range(len(cases)), cases, rotation=45, ha="right")
        ax.set_ylabel("median time (ms, log)")
        ax.set_title("median time per case (hollow: not gated)")
        ax.legend(fontsize=7, ncol=1, bbox_to_anchor=(1.01, 1), loc="upper left")
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


def error_table(res: Results) -> pd.DataFrame:
    """Max error over tolerance per (variant, case, scale), worst seed."""
    rows = []
    for (c, v), d in res.correctness.items():
        for r in d.get("results") or []:
            if r.get("max_over_tol") is not None:
                rows.append({"variant": v, "case": c, "scale": float(r["scale"]),
                             "max_over_tol": float(r["max_over_tol"])})
    if not rows:
        return pd.DataFrame(columns=["variant", "case", "scale", "max_over_tol"])
    return pd.DataFrame(rows).groupby(["variant", "case", "scale"], as_index=False)["max_over_tol"].max()


def plot_error_heatmap(res: Results, path: Path) -> None:
    plt = _plt()
    import numpy as np
    from matplotlib.colors import LogNorm
    et = error_table(res)
    variants = [v for v in res.variants if v in set(et["variant"])]
    n = max(1, len(variants))
    ncols = min(3, n)
    nrows = math.ceil(n / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.2 * ncols, 0.35 * len(res.cases) * nrows + 1.8 * nrows),
                             squeeze=False)
    if not variants:
        _empty(axes[0][0], "no correctness results")
    im = None
    for ax, v in zip(axes.flat, variants):
        t = et[et["variant"] == v].pivot(index="case", columns="scale", values="max_over_tol")
        t = t.reindex([c for c in res.cases if c in t.index])
        data = np.clip(t.to_numpy(dtype=float), 1e-4, 1e4)
        im = ax.imshow(data, aspect="auto", cmap="RdYlGn_r", norm=LogNorm(1e-3, 1e3))
        ax.set_xticks(range(len(t.columns)), [f"{s:g}" for s in t.columns], rotation=45, fontsize=7)
        ax.set_yticks(range(len(t.index)), t.index, fontsize=7)
        for (i, j), val in np.ndenumerate(t.to_numpy(dtype=float)):
            if val == val:
                ax.text(j, i, f"{val:.1g}", ha="center", va="center", fontsize=5.5,
                        color="k", fontweight="bold" if val > 1 else "normal")
        ax.set_title(v, fontsize=9)
        ax.set_xlabel("input scale", fontsize=7)
    for ax in list(axes.flat)[len(variants):]:
        ax.set_axis_off()
    if im is not None:
        fig.colorbar(im, ax=axes, shrink=0.8, label="max |err| / tolerance (>1 fails)")
    fig.subplots_adjust(wspace=0.35, hspace=0.55)
    fig.suptitle("max error over tolerance, worst seed")
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


def plot_roofline(df: pd.DataFrame, ceilings: dict, path: Path, gpu: str) -> None:
    plt = _plt()
    import numpy as np
    fig, ax = plt.subplots(figsize=(7.5, 5))
    pts = df.dropna(subset=["tflops", "intensity"])
    lo = max(1e-2, float(pts["intensity"].min()) / 3) if len(pts) else 1.0
    hi = max(lo * 100, float(pts["intensity"].max()) * 3) if len(pts) else 1e4
    x = np.logspace(math.log10(lo), math.log10(hi), 200)
    hbm = float(ceilings.get("hbm_tbps", float("nan")))
    roofs = [("fp32", ceilings.get("fp32_tflops")), ("tf32", ceilings.get("tf32_tflops")),
             ("bf16", ceilings.get("bf16_tflops")),
             ("bf16/3 (split precision)", (ceilings.get("bf16_tflops") or float("nan")) / 3)]
    for name, peak in roofs:
        if peak:
            ax.plot(x, np.minimum(float(peak), x * hbm), lw=1, label=f"{name} {float(peak):.3g} TFLOP/s")
    ax.plot(x, x * hbm, "k--", lw=0.8, label=f"HBM {hbm:g} TB/s")
    markers = "osD^v<>ph*XP8H"
    for i, (v, g) in enumerate(pts.groupby("variant", sort=False)):
        big = v == HEADLINE_VARIANT
        ax.scatter(g["intensity"], g["tflops"], marker=markers[i % len(markers)], s=60 if big else 22,
                   label=v, zorder=3, edgecolors="k" if big else "none",
                   facecolors=["C3" if big else f"C{i % 10}" if ok else "none" for ok in g["usable"]])
    for c, g in pts.groupby("case"):
        ax.annotate(c, (g["intensity"].iloc[0], g["tflops"].max()), fontsize=6, xytext=(2, 4),
                    textcoords="offset points")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP / minimum HBM byte)")
    ax.set_ylabel("achieved TFLOP/s")
    ax.set_title(f"roofline, {gpu} (hollow: fails the gate)")
    ax.legend(fontsize=6, ncol=2, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ---------------------------------------------------------------- ncu table


def ncu_table(res: Results, top: int = 8) -> pd.DataFrame:
    rows = []
    for (c, v), d in sorted(res.ncu.items()):
        if d.get("status") != "ok":
            rows.append({"case": c, "variant": v, "kernel": f"({d.get('status')}: {str(d.get('reason', ''))[:80]})"})
            continue
        ks = sorted(d.get("kernels") or [], key=lambda k: -(k.get("duration_us") or 0))
        for k in ks[:top]:
            rows.append({"case": c, "variant": v, "kernel": str(k.get("name", ""))[:60],
                         "launches": k.get("launches", 1),
                         "duration_us": k.get("duration_us"), "sm_pct": k.get("sm_throughput_pct"),
                         "dram_pct": k.get("dram_throughput_pct"),
                         "occupancy_pct": k.get("achieved_occupancy_pct"), "registers": k.get("registers"),
                         "smem_bytes": k.get("shared_mem_bytes")})
        if len(ks) > top:
            rest = sum(k.get("duration_us") or 0 for k in ks[top:])
            rows.append({"case": c, "variant": v, "kernel": f"... {len(ks) - top} more", "duration_us": rest})
    return pd.DataFrame(rows)


# ---------------------------------------------------------------- writing


def md_table(df: pd.DataFrame, cols: list[str] | None = None) -> str:
    if df is None or not len(df):
        return "_(none)_\n"
    cols = cols or list(df.columns)
    out = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for r in df[cols].itertuples(index=False):
        out.append("| " + " | ".join(_fmt(x).replace("|", "\\|") for x in r) + " |")
    return "\n".join(out) + "\n"


SUMMARY_VIEW = ["case", "variant", "gate", "worst_scale", "worst_seed", "worst_over_tol", "margin_over_tol", "median_ms",
                "speedup_vs_eager", "speedup_vs_compile_default", "speedup_vs_best_compile",
                "speedup_vs_best_peer", "anchor_ratio", "tflops", "gbps", "ceiling", "pct_of_ceiling", "note"]


def headline_table(h: dict) -> pd.DataFrame:
    return pd.DataFrame([{"comparison": f"{h['variant']} vs {COMPARISONS[c]}", "geomean speedup": h["geomean"][c],
                          "cases": h["n_cases"][c], "over": ", ".join(h["cases"][c])} for c in COMPARISONS])


def write_report(out_dir, res: Results, info: dict, ceilings: dict, gpu: str, correctness_gpu: str,
                 ncu_gpu: str | None = None, title: str = "", overrides: list[str] | None = None) -> dict:
    """Build every output of the report into ``out_dir``; returns {'summary', 'headline', 'missing'}."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for stage, c, v, p in res.missing:
        why = res.why_missing.get((stage, c, v))
        print(f"report: warning: missing {stage} result for {c} x {v} ({p}){'; ' + why if why else ''}; the case "
              "is excluded where it is needed", file=sys.stderr)
    for stage, c, v, p, why in res.invalid:
        print(f"report: warning: invalid {stage} result for {c} x {v}, not counted: {why}", file=sys.stderr)
    df = build_summary(res, info, ceilings)
    h = headline(df, res)
    df.to_csv(out / "summary.csv", index=False)
    plot_speedup_bars(df, out / "speedup_bars.png") if len(df) else None
    plot_time_per_case(df, out / "time_per_case.png") if len(df) else None
    plot_error_heatmap(res, out / "error_heatmap.png")
    plot_roofline(df, ceilings, out / "roofline.png", gpu) if len(df) else None
    for f in ("speedup_bars.png", "time_per_case.png", "roofline.png"):  # an empty run still yields files
        if not (out / f).exists():
            plt = _plt()
            fig, ax = plt.subplots()
            _empty(ax, "no results")
            fig.savefig(out / f)
            plt.close(fig)
    excl = pd.DataFrame(h["exclusions"], columns=["comparison", "case", "reason"])
    missing = pd.DataFrame(res.missing, columns=["stage", "case", "variant", "path"])
    missing["why"] = [res.why_missing.get((st, c, v)) or "" for st, c, v, _ in res.missing]
    invalid = pd.DataFrame(res.invalid, columns=["stage", "case", "variant", "path", "reason"])
    nt = ncu_table(res)
    valid = [d for d in list(res.timing.values()) + list(res.correctness.values()) if not d.get("invalid")]
    commits = sorted({(d.get("env") or {}).get("git_commit", "?") for d in valid})
    gpus = sorted({str((d.get("env") or {}).get("gpu_name") or "no GPU") for d in res.timing.values()
                   if not d.get("invalid")})
    meta = [f"timing GPU type `{gpu}` ({', '.join(gpus) or 'no results'}), gate verdicts from `{correctness_gpu}`"
            + (f", Nsight Compute from `{ncu_gpu}`" if ncu_gpu else ""),
            f"{len(res.cases)} cases x {len(res.variants)} variants; commits: {', '.join(commits) or '-'}; "
            f"built {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} by `python -m workflow.report`"]
    if overrides:
        meta.append("job overrides (Hydra): " + " ".join(f"`{o}`" for o in overrides))
    md = [f"# Gated speedup report: {gpu}" + (f" ({title})" if title else ""), ""]
    md += [f"- {m}" for m in meta]
    md += ["", f"## Headline: `{h['variant']}` (geomean over cases where it passes the gate)", "",
           md_table(headline_table(h)), "### Excluded cases", "", md_table(excl)]
    if len(missing):
        md += [f"### Missing results ({len(missing)})", "", md_table(missing)]
    if len(invalid):
        md += [f"### Invalid results, not counted ({len(invalid)})", "",
               "Each fails its schema (`workflow/schemas.py`) or is not this run's; the workflow moves it aside "
               "(`<file>.invalid`) and regenerates it.", "", md_table(invalid)]
    md += ["## Per case x variant", "", md_table(df, SUMMARY_VIEW) if len(df) else "_(none)_\n",
           "`worst_over_tol` is the gate's worst error over its tolerance (7 scales x seeds); `margin_over_tol` the "
           "worst over the margin check's unseen inputs and weight seeds (SPEC §4: at most 0.9; `-` where it did not "
           "run: peers, or older results). "
           "Speedups are baseline median / this median on the same GPU type; `best_compile` / `best_peer` "
           "count only gated peers that pass the gate (correctness JSON) and were timed. `pct_of_ceiling` is "
           "TFLOP/s over the binding roof min(AI x HBM, max(fp32, bf16/3)).", "",
           "## Figures", "", "![speedups](speedup_bars.png)", "", "![time per case](time_per_case.png)", "",
           "![error over tolerance](error_heatmap.png)", "", "![roofline](roofline.png)", ""]
    md += ["## Nsight Compute (per kernel, longest first)", "",
           md_table(nt) if len(nt) else "_(no ncu results in this run)_\n"]
    (out / "report.md").write_text("\n".join(md))
    (out / "report.html").write_text(_html(gpu, title, meta, h, excl, missing, df, nt, invalid))
    return {"summary": df, "headline": h, "missing": res.missing, "invalid": res.invalid}


def _html(gpu, title, meta, h, excl, missing, df, nt, invalid=None) -> str:
    def table(d, cols=None):
        if d is None or not len(d):
            return "<p><em>(none)</em></p>"
        d = d[cols] if cols else d
        return d.to_html(index=False, na_rep="-", float_format=lambda x: f"{x:.3g}", border=0, classes="t")
    e = html.escape
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>report {e(gpu)}</title>",
             "<style>body{font-family:sans-serif;margin:2em}table.t{border-collapse:collapse;font-size:12px}"
             "table.t td,table.t th{border:1px solid #ccc;padding:2px 6px;text-align:right}"
             "img{max-width:100%}</style></head><body>",
             f"<h1>Gated speedup report: {e(gpu)}{' (' + e(title) + ')' if title else ''}</h1><ul>"
             + "".join(f"<li>{e(m)}</li>" for m in meta) + "</ul>",
             f"<h2>Headline: {e(h['variant'])} (geomean over cases where it passes the gate)</h2>",
             table(headline_table(h)), "<h3>Excluded cases</h3>", table(excl)]
    if len(missing):
        parts += [f"<h3>Missing results ({len(missing)})</h3>", table(missing)]
    if invalid is not None and len(invalid):
        parts += [f"<h3>Invalid results, not counted ({len(invalid)})</h3>", table(invalid)]
    parts += ["<h2>Per case x variant</h2>", table(df, SUMMARY_VIEW) if len(df) else "",
              "<h2>Figures</h2>"] + [f"<p><img src='{f}' alt='{f}'></p>" for f in REPORT_FILES if f.endswith(".png")]
    parts += ["<h2>Nsight Compute</h2>", table(nt) if len(nt) else "<p><em>(no ncu results)</em></p>",
              "</body></html>"]
    return "\n".join(parts)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", default="outputs", help="results root (outputs or outputs/tag/<tag>)")
    ap.add_argument("--gpu", required=True, help="timing GPU type")
    ap.add_argument("--correctness-gpu", help="GPU type of the gate verdicts (default: --gpu)")
    ap.add_argument("--ncu-gpu", help="GPU type of the ncu summaries (default: none)")
    ap.add_argument("--cases", nargs="*", help="expected cases (default: those with results)")
    ap.add_argument("--variants", nargs="*", help="expected variants (default: those with results)")
    ap.add_argument("--variant-info", help="JSON {variant: {kind, gated_peer}} (default: the kernels registry)")
    ap.add_argument("--ceilings", help="JSON GPU ceilings (default: config/gpu/<gpu>.yaml)")
    ap.add_argument("--out-dir", help="default <root>/report/<gpu>")
    ap.add_argument("--title", default="")
    ap.add_argument("--overrides", nargs="*", default=[])
    ap.add_argument("--tag", help="the run's tag: a result of another tag is invalid (default: <tag> for a root "
                    "outputs/tag/<tag>, else none: the default results)")
    ap.add_argument("--strict", action="store_true", help="exit 1 when an expected result is missing or invalid")
    a = ap.parse_args(argv)
    cgpu = a.correctness_gpu or a.gpu
    root = Path(a.root)
    tag = a.tag if a.tag is not None else (root.name if root.parent.name == "tag" else "")
    res = load_results(root, a.gpu, cgpu, a.ncu_gpu, a.cases, a.variants, tag=tag)
    info = json.loads(a.variant_info) if a.variant_info else {}
    unknown = [v for v in res.variants if v not in info]
    if unknown:
        info.update(default_variant_info(unknown))
    ceilings = json.loads(a.ceilings) if a.ceilings else ceilings_of(a.gpu)
    out = a.out_dir or str(Path(a.root) / "report" / a.gpu)
    r = write_report(out, res, info, ceilings, a.gpu, cgpu, a.ncu_gpu, a.title, a.overrides)
    h = r["headline"]
    print(f"report: {out}: " + ", ".join(f"{h['variant']} vs {c} {_fmt(h['geomean'][c])}x over "
                                         f"{h['n_cases'][c]} cases" for c in COMPARISONS), file=sys.stderr)
    if r["missing"] or r["invalid"]:
        print(f"report: error: {len(r['missing'])} expected result(s) missing, {len(r['invalid'])} invalid "
              "(listed in report.md)", file=sys.stderr)
        return 1 if a.strict else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
