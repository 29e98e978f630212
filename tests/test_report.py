"""The gated report from synthetic result JSONs: every geomean, and every exclusion with its reason.

The report only reads JSON, so these tests write the files a run would have written and check the
numbers by hand. Timing on GPU type ``h200``, gate verdicts from ``mig`` (a different GPU type on purpose:
gated comparisons must use the correctness results, not the timing ones).
"""
from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from workflow import report as R

REPO = Path(__file__).resolve().parents[1]
VARIANTS = ["eager", "eager_sdpa", "compile_default_fp32", "compile_default_tf32",
            "compile_reduce-overhead_fp32", "auto"]
INFO = {v: {"kind": "peer", "gated_peer": not v.endswith("_tf32")} for v in VARIANTS}
INFO["auto"] = {"kind": "ours", "gated_peer": False}
CEILINGS = {"fp32_tflops": 51.0, "tf32_tflops": 362.0, "bf16_tflops": 686.0, "hbm_tbps": 4.3}

# (case, variant) -> (correctness status, passed, timing status, median_ms); None = no file at all
PLAN = {
    # c1: everything passes; the TF32 preset is fastest and even passes, but never counts as gated
    ("c1", "eager"): ("ok", True, "ok", 10.0),
    ("c1", "eager_sdpa"): ("ok", True, "ok", 8.0),
    ("c1", "compile_default_fp32"): ("ok", True, "ok", 6.0),
    ("c1", "compile_default_tf32"): ("ok", True, "ok", 2.0),
    ("c1", "compile_reduce-overhead_fp32"): ("ok", True, "ok", 5.0),
    ("c1", "auto"): ("ok", True, "ok", 2.5),
    # c2: eager out of memory; the fastest compile preset fails the gate (on the correctness GPU)
    ("c2", "eager"): ("oom", False, "oom", None),
    ("c2", "eager_sdpa"): ("ok", True, "ok", 2.5),
    ("c2", "compile_default_fp32"): ("ok", True, "ok", 3.0),
    ("c2", "compile_default_tf32"): ("ok", False, "ok", 0.5),
    ("c2", "compile_reduce-overhead_fp32"): ("ok", False, "ok", 1.0),
    ("c2", "auto"): ("ok", True, "ok", 1.5),
    # c3: auto fails the gate
    ("c3", "eager"): ("ok", True, "ok", 4.0),
    ("c3", "eager_sdpa"): ("ok", True, "ok", 3.0),
    ("c3", "compile_default_fp32"): ("ok", True, "ok", 2.0),
    ("c3", "compile_default_tf32"): ("ok", False, "ok", 1.0),
    ("c3", "compile_reduce-overhead_fp32"): ("ok", True, "ok", 2.0),
    ("c3", "auto"): ("ok", False, "ok", 0.1),
    # c4: auto's timing result is missing
    ("c4", "eager"): ("ok", True, "ok", 4.0),
    ("c4", "eager_sdpa"): ("ok", True, "ok", 3.0),
    ("c4", "compile_default_fp32"): ("ok", True, "ok", 2.0),
    ("c4", "compile_default_tf32"): ("ok", False, "ok", 1.0),
    ("c4", "compile_reduce-overhead_fp32"): ("ok", True, "ok", 2.0),
    ("c4", "auto"): ("ok", True, None, None),
}
CASES = ["c1", "c2", "c3", "c4"]
SCALES = [0.001, 1.0, 1000.0]


def _write(path: Path, d: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(d))


GPUS = {"correctness": "mig", "timing": "h200", "ncu": "h100_96"}


def _header(stage, case, variant, status, passed, reason):
    """What every record has (``workflow/schemas.py``: the report refuses records without it)."""
    return {"schema": f"mkh.{stage}/1", "stage": stage, "case": case, "variant": variant, "impl": variant,
            "gpu": GPUS[stage], "tag": "", "params": {}, "status": status, "passed": passed, "reason": reason,
            "env": {"git_commit": "abc1234", "gpu_name": "H200"}, "config": {}, "wall_s": 1.0}


def _correctness(case, variant, status, passed):
    over = 0.3 if passed else 2.5
    results = [{"scale": s, "seed": seed, "passed": passed or s != 0.001, "max_abs": 1e-4, "max_rel": 1e-3,
                "frac_failing": 0.0 if passed or s != 0.001 else 0.1,
                "max_over_tol": over if s == 0.001 else over / 10} for s in SCALES for seed in (0, 1)]
    d = _header("correctness", case, variant, status, bool(passed and status == "ok"),
                "" if status == "ok" else f"{status} reason")
    if status == "ok":
        d.update(results=results, worst={"scale": 0.001, "seed": 0, "max_abs": 1e-4, "max_over_tol": over},
                 guards={"finite": True})
    return d


def _timing(case, variant, status, ms):
    d = _header("timing", case, variant, status, status == "ok", "" if status == "ok" else f"{status}: out of memory")
    if status == "ok":
        d.update(median_ms=ms, p20_ms=ms * 0.98, p80_ms=ms * 1.02, anchor_ratio=ms / 3.0, n=3,
                 times_ms=[ms * 0.98, ms, ms * 1.02], post_check={"passed": True},
                 tflops=1.0 / ms, gbps=100.0 / ms, passed_post_check=True)
    return d


def write_results(root: Path) -> Path:
    for (c, v), (cs, passed, ts, ms) in PLAN.items():
        _write(root / "correctness" / "mig" / c / f"{v}.json", _correctness(c, v, cs, passed))
        if ts is not None:
            _write(root / "timing" / "h200" / c / f"{v}.json", _timing(c, v, ts, ms))
    _write(root / "ncu" / "h100_96" / "c1" / "auto.json", dict(
        _header("ncu", "c1", "auto", "ok", True, ""),
        kernels=[{"name": "seqres_megakernel", "launches": 1, "duration_us": 2400.0,
                  "sm_throughput_pct": 71.0, "dram_throughput_pct": 12.0,
                  "achieved_occupancy_pct": 24.5, "registers": 168,
                  "shared_mem_bytes": 98304}]))
    return root


@pytest.fixture(scope="module")
def results_root(tmp_path_factory):
    return write_results(tmp_path_factory.mktemp("results") / "outputs")


@pytest.fixture(scope="module")
def built(results_root, tmp_path_factory):
    res = R.load_results(results_root, "h200", "mig", "h100_96", CASES, VARIANTS)
    out = tmp_path_factory.mktemp("report")
    r = R.write_report(out, res, INFO, CEILINGS, "h200", "mig", "h100_96", title="synthetic")
    return r, out


def _row(df, case, variant):
    return df[(df["case"] == case) & (df["variant"] == variant)].iloc[0]


def test_every_case_x_variant_has_a_row_with_gate_and_speedups(built):
    r, out = built
    df = pd.read_csv(out / "summary.csv")
    assert len(df) == len(CASES) * len(VARIANTS)
    assert set(zip(df["case"], df["variant"])) == {(c, v) for c in CASES for v in VARIANTS}
    for col in ("gate", "worst_scale", "worst_seed", "median_ms", "speedup_vs_eager", "speedup_vs_compile_default",
                "speedup_vs_best_compile", "speedup_vs_best_peer", "anchor_ratio", "tflops", "gbps",
                "pct_of_ceiling"):
        assert col in df.columns
    for f in R.REPORT_FILES:
        assert (out / f).stat().st_size > 0, f


def test_per_case_speedups(built):
    df = built[0]["summary"]
    a1 = _row(df, "c1", "auto")
    assert a1["speedup_vs_eager"] == pytest.approx(10.0 / 2.5)
    assert a1["speedup_vs_compile_default"] == pytest.approx(6.0 / 2.5)
    # the TF32 preset (2.0 ms, passing) is not a gated peer: fastest gated compile = reduce-overhead 5.0
    assert a1["baseline_best_compile"] == "compile_reduce-overhead_fp32"
    assert a1["speedup_vs_best_compile"] == pytest.approx(5.0 / 2.5)
    assert a1["baseline_best_peer"] == "compile_reduce-overhead_fp32"
    a2 = _row(df, "c2", "auto")
    # reduce-overhead is fastest (1.0 ms) but fails the gate on the correctness GPU: not gated
    assert a2["baseline_best_compile"] == "compile_default_fp32"
    assert a2["speedup_vs_best_compile"] == pytest.approx(3.0 / 1.5)
    assert a2["baseline_best_peer"] == "eager_sdpa"
    assert a2["speedup_vs_best_peer"] == pytest.approx(2.5 / 1.5)
    assert math.isnan(a2["speedup_vs_eager"])  # eager OOM
    assert a1["anchor_ratio"] == pytest.approx(2.5 / 3.0)
    assert _row(df, "c2", "eager")["gate"] == "oom"
    assert _row(df, "c3", "auto")["gate"] == "fail"
    assert _row(df, "c3", "auto")["worst_scale"] == 0.001


def test_headline_geomeans_count_only_cases_where_auto_passes(built):
    h = built[0]["headline"]
    assert h["cases"]["eager"] == ["c1"]                    # c2: eager OOM, c3: gate, c4: missing
    assert h["geomean"]["eager"] == pytest.approx(4.0)
    assert h["cases"]["compile_default"] == ["c1", "c2"]
    assert h["geomean"]["compile_default"] == pytest.approx(math.sqrt(2.4 * 2.0))
    assert h["geomean"]["best_compile"] == pytest.approx(math.sqrt(2.0 * 2.0))
    assert h["geomean"]["best_peer"] == pytest.approx(math.sqrt(2.0 * (2.5 / 1.5)))
    assert h["n_cases"] == {"eager": 1, "compile_default": 2, "best_compile": 2, "best_peer": 2}


def test_every_exclusion_is_listed_with_its_reason(built):
    r, out = built
    excl = {(c, case): why for c, case, why in r["headline"]["exclusions"]}
    assert "peer OOM (eager)" in excl[("eager", "c2")]
    assert "gate failed" in excl[("all", "c3")]
    assert "missing result (auto timing)" in excl[("all", "c4")]
    assert ("all", "c1") not in excl and ("all", "c2") not in excl
    md = (out / "report.md").read_text()
    for needle in ("peer OOM (eager)", "gate failed", "missing result (auto timing)", "Missing results (1)",
                   "seqres_megakernel"):
        assert needle in md
    assert r["missing"] == [("timing", "c4", "auto", str(Path(r["missing"][0][3])))]


def test_missing_result_is_a_clear_error_from_the_cli(results_root, tmp_path):
    out = tmp_path / "cli-report"
    args = [sys.executable, "-m", "workflow.report", "--root", str(results_root), "--gpu", "h200",
            "--correctness-gpu", "mig", "--cases", *CASES, "--variants", *VARIANTS,
            "--variant-info", json.dumps(INFO), "--ceilings", json.dumps(CEILINGS), "--out-dir", str(out)]
    p = subprocess.run(args, cwd=REPO, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr           # a warning by default: the report is still written
    assert "missing timing result for c4 x auto" in p.stderr
    p = subprocess.run(args + ["--strict"], cwd=REPO, capture_output=True, text=True)
    assert p.returncode == 1 and "1 expected result(s) missing" in p.stderr
    assert (out / "summary.csv").exists()


def test_post_timing_check_failure_is_not_gated(tmp_path):
    results_root = write_results(tmp_path / "outputs")
    p = results_root / "timing" / "h200" / "c1" / "compile_reduce-overhead_fp32.json"
    d = json.loads(p.read_text())
    d["passed_post_check"] = d["passed"] = d["post_check"]["passed"] = False  # (the job's record says all three)
    p.write_text(json.dumps(d))
    res = R.load_results(results_root, "h200", "mig", None, CASES, VARIANTS)
    df = R.build_summary(res, INFO, CEILINGS)
    a1 = _row(df, "c1", "auto")
    assert a1["baseline_best_compile"] == "compile_default_fp32"
    assert a1["baseline_best_peer"] == "compile_default_fp32"


def test_binding_ceiling():
    assert R.binding_ceiling(1.0, CEILINGS) == ("HBM", pytest.approx(4.3))
    name, roof = R.binding_ceiling(1e4, CEILINGS)
    assert name == "bf16/3" and roof == pytest.approx(686.0 / 3)


def test_error_table_takes_the_worst_seed(results_root):
    res = R.load_results(results_root, "h200", "mig", None, CASES, VARIANTS)
    et = R.error_table(res)
    row = et[(et["variant"] == "auto") & (et["case"] == "c3") & (et["scale"] == 0.001)]
    assert row["max_over_tol"].item() == pytest.approx(2.5)


def test_noisy_timing_and_timing_flags_are_noted(tmp_path):
    """A wide p20-p80 spread and the timing stage's own flags reach the row's note (still counted: the
    median is what was measured)."""
    results_root = write_results(tmp_path / "outputs")
    p = results_root / "timing" / "h200" / "c1" / "auto.json"
    d = json.loads(p.read_text())
    d.update(p20_ms=2.4, p80_ms=4.0, min_ms=2.3, flags=["SM clock moved 300 MHz during the run (bound 150)"])
    p.write_text(json.dumps(d))
    df = R.build_summary(R.load_results(results_root, "h200", "mig", None, CASES, VARIANTS), INFO, CEILINGS)
    note = _row(df, "c1", "auto")["note"]
    assert "noisy timing: p20-p80 2.4-4 ms is 64% of the median (fastest call 2.3 ms)" in note
    assert "timing flag: SM clock moved 300 MHz" in note
    assert _row(df, "c1", "auto")["usable"]
    assert _row(df, "c1", "eager")["note"] == ""  # a 4% spread is not noted


# ---------------------------------------------------------------- invalid results are never counted (issue 32)


@pytest.mark.parametrize("content", [
    '{"status": "ok", "passed": true}',      # hand-written "pass"
    "[]", '"x"',                              # not a record
    None,                                     # truncated
])
def test_a_forged_or_broken_result_is_marked_invalid_and_never_counted(tmp_path, content):
    """c4's auto correctness replaced: the headline does not count it, the report lists it as invalid."""
    root = write_results(tmp_path / "outputs")
    _write(root / "timing" / "h200" / "c4" / "auto.json", _timing("c4", "auto", "ok", 1.0))  # c4 would count
    p = root / "correctness" / "mig" / "c4" / "auto.json"
    p.write_text(content if content is not None else p.read_text()[:150])
    res = R.load_results(root, "h200", "mig", None, CASES, VARIANTS, tag="")
    df = R.build_summary(res, INFO, CEILINGS)
    assert _row(df, "c4", "auto")["gate"] == "invalid" and not _row(df, "c4", "auto")["usable"]
    h = R.headline(df, res)
    assert "c4" not in h["cases"]["best_peer"] and h["cases"]["best_peer"] == ["c1", "c2"]
    assert any(case == "c4" and "invalid" in why for _, case, why in h["exclusions"])
    assert [(s, c, v) for s, c, v, _, _ in res.invalid] == [("correctness", "c4", "auto")]
    out = tmp_path / "report"
    R.write_report(out, res, INFO, CEILINGS, "h200", "mig")
    assert "Invalid results, not counted (1)" in (out / "report.md").read_text()


def test_a_self_contradicting_record_is_invalid(tmp_path):
    """passed=true while a scale x seed check failed; a p20 above the median; another case's record copied in."""
    root = write_results(tmp_path / "outputs")
    c3 = root / "correctness" / "mig" / "c3" / "auto.json"
    d = json.loads(c3.read_text())
    d["passed"] = True                        # auto fails at scale 0.001 on c3
    c3.write_text(json.dumps(d))
    t1 = root / "timing" / "h200" / "c1" / "eager.json"
    t1.write_text(json.dumps(dict(json.loads(t1.read_text()), p20_ms=11.0)))
    (root / "timing" / "h200" / "c2" / "auto.json").write_text(
        (root / "timing" / "h200" / "c1" / "auto.json").read_text())
    res = R.load_results(root, "h200", "mig", None, CASES, VARIANTS)
    why = {(s, c, v): r for s, c, v, _, r in res.invalid}
    assert "passed=true while a scale x seed check failed" in why[("correctness", "c3", "auto")]
    assert "p20 11.0 <= median 10.0" in why[("timing", "c1", "eager")]
    assert "case 'c1' in the record, 'c2' in its path" in why[("timing", "c2", "auto")]


def test_an_override_runs_result_never_counts_as_a_default_result(tmp_path):
    """A result with another run's tag (e.g. an override run's written by hand with out= to a default path)."""
    root = write_results(tmp_path / "outputs")
    p = root / "timing" / "h200" / "c1" / "auto.json"
    p.write_text(json.dumps(dict(json.loads(p.read_text()), tag="block_m-16-0123abcd")))
    res = R.load_results(root, "h200", "mig", None, CASES, VARIANTS, tag="")
    assert [(s, c, v) for s, c, v, _, _ in res.invalid] == [("timing", "c1", "auto")]
    assert "written by a run with tag block_m-16-0123abcd" in res.invalid[0][4]
    assert R.load_results(root, "h200", "mig", None, CASES, VARIANTS, tag=None).invalid == []  # (not checked)


def test_the_cli_checks_the_tag_of_its_root(results_root, tmp_path):
    """By hand, the tag comes from the root (outputs/tag/<tag> -> <tag>, else the default results)."""
    args = [sys.executable, "-m", "workflow.report", "--root", str(results_root), "--gpu", "h200",
            "--correctness-gpu", "mig", "--cases", "c1", "--variants", "auto", "--variant-info", json.dumps(INFO),
            "--ceilings", json.dumps(CEILINGS), "--out-dir", str(tmp_path / "r"), "--strict"]
    assert subprocess.run(args, cwd=REPO, capture_output=True, text=True).returncode == 0
    p = subprocess.run(args + ["--tag", "other"], cwd=REPO, capture_output=True, text=True)
    assert p.returncode == 1 and "invalid correctness result for c1 x auto" in p.stderr
