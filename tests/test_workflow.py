"""The Snakemake workflow: the matrix from Hydra decides the jobs, GPU types decide the Slurm resources,
overrides are validated, tagged and quoted, and the smoke matrix runs end to end on a CPU.

Every test works on a copy of the repository in a temporary directory (Snakemake writes .snakemake/ and
outputs/ where it runs), so the checkout is never touched and tests can run in parallel with other work.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
SNAKEMAKE = [sys.executable, "-m", "snakemake"]
IGNORE = shutil.ignore_patterns(".venv", ".git", "outputs", ".snakemake", "__pycache__", ".pytest_cache",
                                "*.egg-info", ".whl", ".site", ".gl")


def copy_repo(dst: Path) -> Path:
    shutil.copytree(REPO, dst, ignore=IGNORE, symlinks=True)
    (dst / "job-scripts" / "outputs").mkdir(parents=True, exist_ok=True)
    return dst


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    return copy_repo(tmp_path_factory.mktemp("wf") / "repo")


def env() -> dict:
    e = dict(os.environ)
    e["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{e.get('PATH', '')}"
    e["CUDA_VISIBLE_DEVICES"] = ""  # matrix=auto must mean smoke here, GPU or not
    return e


def smk(repo: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    p = subprocess.run([*SNAKEMAKE, *args], cwd=repo, capture_output=True, text=True, env=env())
    if check and p.returncode != 0:
        raise AssertionError(f"snakemake {' '.join(args)} failed ({p.returncode}):\n{p.stdout[-3000:]}\n"
                             f"{p.stderr[-5000:]}")
    return p


def job_counts(text: str) -> dict[str, int]:
    """The 'Job stats' table of a dry run: {rule: count}."""
    lines = text[text.index("Job stats:"):].splitlines()[3:]
    counts = {}
    for ln in lines:
        parts = ln.split()
        if len(parts) != 2 or not parts[1].isdigit():
            break
        counts[parts[0]] = int(parts[1])
    return counts


_DRY: dict = {}


def dry(repo: Path, *args: str) -> tuple[dict[str, int], str]:
    """A forced dry run (``--config`` last: it swallows what follows); cached per argument list."""
    key = (str(repo), args)
    if key not in _DRY:
        p = smk(repo, "-n", "--forceall", "-p", *args)
        text = p.stdout + p.stderr
        _DRY[key] = (job_counts(text), text)
    return _DRY[key]


# ---------------------------------------------------------------- what the matrix says


def matrix_expectation(name: str) -> dict:
    """Cases and variants of config/matrix/<name>.yaml, composed with Hydra, expanded independently of the
    workflow: `all` cases = every non-smoke case config, `all` variants = every variant config the kernels
    registry runs."""
    from hydra import compose, initialize_config_dir
    from kernels import list_variants
    with initialize_config_dir(config_dir=str(REPO / "config"), version_base="1.3"):
        m = compose("config", overrides=[f"+matrix={name}"]).matrix
    cfgs = {p.stem: yaml.safe_load(p.read_text()) for p in (REPO / "config" / "case").glob("*.yaml")}
    if m.cases in ("all", "smoke"):
        cases = [n for n, c in cfgs.items() if bool(c.get("smoke")) == (m.cases == "smoke")]
    else:
        cases = list(m.cases)
    registered = set(list_variants())
    vcfgs = {p.stem: yaml.safe_load(p.read_text()) for p in (REPO / "config" / "variant").glob("*.yaml")}
    runnable = [n for n, v in vcfgs.items() if v.get("impl", n) in registered]
    variants = runnable if m.variants == "all" else list(m.variants)
    ncu = [v for v in (m.ncu_variants or []) if v in variants]
    return {"cases": cases, "variants": variants, "ncu": ncu, "stages": dict(m.stages)}


@pytest.mark.parametrize("name", ["full", "quick", "smoke", "families"])
def test_dry_run_job_counts_equal_the_matrix(repo, name):
    want = matrix_expectation(name)
    counts, text = dry(repo, "--config", f"matrix={name}")
    n = len(want["cases"])
    assert counts.get("correctness") == n * len(want["variants"]), counts
    assert counts.get("timing") == n * len(want["variants"]), counts
    assert counts.get("ncu", 0) == n * len(want["ncu"]), counts
    assert counts.get("report") == 1 and counts.get("all") == 1, counts
    for stage in ("correctness", "timing"):
        assert f"outputs/{stage}/{want['stages'][stage]}/" in text


def test_full_matrix_has_14_cases_and_ncu_only_for_auto(repo):
    want = matrix_expectation("full")
    assert len(want["cases"]) == 14 and want["ncu"] == ["auto"]
    counts, text = dry(repo, "--config", "matrix=full")
    assert counts["ncu"] == 14
    assert set(re.findall(r"outputs/ncu/h100_96/case\d\d/(\w+)\.json", text)) == {"auto"}


def test_ncu_variants_key_replaces_the_matrix_choice(repo):
    counts, text = dry(repo, "--config", "matrix=families", "cases=[case02,case12]", "variants=[auto,dag]",
                       "ncu_variants=[dag]")
    assert counts["ncu"] == 2
    assert set(re.findall(r"outputs/ncu/\w+/case\d\d/(\w+)\.json", text)) == {"dag"}


def test_auto_matrix_is_smoke_without_a_gpu(repo):
    auto, _ = dry(repo)
    smoke, _ = dry(repo, "--config", "matrix=smoke")
    assert auto == smoke


def test_gpu_key_moves_every_stage(repo):
    counts, text = dry(repo, "--config", "matrix=quick", "gpu=h200")
    assert counts["correctness"] == 16 and counts["ncu"] == 4
    for stage in ("correctness", "timing", "ncu", "report"):
        assert f"outputs/{stage}/h200/" in text
    assert "outputs/correctness/h100_mig47" not in text


def test_timing_job_resources_come_from_the_h200_gpu_type(repo):
    """With the slurm profile (found through the top-level `slurm` symlink)."""
    h200 = yaml.safe_load((REPO / "config" / "gpu" / "h200.yaml").read_text())["slurm"]
    p = smk(repo, "--profile", "slurm", "-n", "--forceall", "outputs/timing/h200/case07/eager.json")
    text = p.stdout + p.stderr
    assert "Using profiles slurm and workflow specific profile profiles/default" in text
    res = re.search(r"rule timing:.*?resources: ([^\n]+)", text, re.S).group(1)
    assert f"slurm_partition={h200['partition']}" in res
    assert f"gres={h200['gres']}" in res
    assert f"runtime={h200['runtime']}" in res and f"cpus_per_task={h200['cpus_per_task']}" in res
    assert f"mem_mb={h200['mem_mb']}" in res and "slurm_account=" in res
    # the slurm profile runs the full study even on a login node without a GPU
    p = smk(repo, "--profile", "slurm", "-n", "--forceall")
    counts = job_counts(p.stdout + p.stderr)
    assert counts["timing"] == 14 * len(matrix_expectation("full")["variants"])


def test_correctness_jobs_are_scheduled_before_timing_and_ncu(repo):
    """Ready correctness jobs go first (rule priority): on one GPU box they run several at a time and fill the
    compile cache before the timing and ncu jobs, which claim every core and run alone."""
    p = smk(repo, "-n", "--forceall", "outputs/correctness/h200/case07/auto.json",
            "outputs/timing/h200/case07/auto.json", "outputs/ncu/h200/case07/auto.json")
    text = p.stdout + p.stderr
    prio = {m.group(1): int(m.group(2)) for m in
            re.finditer(r"rule (\w+):\n(?:    .*\n)*?    priority: (\d+)", text)}
    assert prio.get("correctness", 0) > prio.get("timing", 0) and prio.get("correctness", 0) > prio.get("ncu", 0), text


def test_per_case_target_is_everything_about_that_case(repo):
    counts, text = dry(repo, "case05", "--config", "matrix=quick", "gpu=h200")
    assert {k: v for k, v in counts.items() if k != "total"} == \
        {"tune": 1, "correctness": 4, "timing": 4, "ncu": 1, "case05": 1}
    assert "case05" in text and "case01" not in re.sub(r"rule case\d\d", "", text).split("Job stats")[0]


def test_the_tune_stage_feeds_correctness_timing_and_ncu(repo):
    """Our variants' jobs read the timing GPU's tuned file (one tune job per case x variant of ours); peers don't."""
    counts, text = dry(repo, "case05", "--config", "matrix=quick", "gpu=h200")
    tuned = "variant.params.tuned_file=outputs/tuned/h200/case05/auto.yaml"
    for stage in ("correctness", "timing", "ncu"):
        assert f"stage={stage} case=case05 variant=auto gpu=h200 out=outputs/{stage}/h200/case05/auto.json" in text
        line = next(ln for ln in text.splitlines() if f"stage={stage} case=case05 variant=auto" in ln)
        assert tuned in line, line
    peer = next(ln for ln in text.splitlines() if "stage=timing case=case05 variant=eager " in ln)
    assert "tuned_file" not in peer
    assert "stage=tune case=case05 variant=auto gpu=h200 out=outputs/tuned/h200/case05/auto.yaml" in text
    assert "variant.params.tune=committed" in text
    # correctness on another GPU type still runs the timing GPU's choice
    _, text = dry(repo, "outputs/correctness/h100_mig47/case05/auto.json", "--config", "matrix=quick")
    assert "variant.params.tuned_file=outputs/tuned/h200/case05/auto.yaml" in text


def test_tune_search_and_off(repo):
    _, text = dry(repo, "outputs/timing/h200/case05/auto.json", "--config", "matrix=quick", "tune=search")
    assert "variant.params.tune=search" in text and "localrule tune" not in text
    counts, text = dry(repo, "outputs/timing/h200/case05/auto.json", "--config", "matrix=quick", "tune=off")
    assert "tune" not in counts and "variant.params.tune=off" in text
    p = smk(repo, "-n", "--config", "tune=fastest", check=False)
    assert p.returncode != 0 and "valid committed, search, off" in p.stdout + p.stderr


def test_file_target(repo):
    counts, text = dry(repo, "outputs/timing/h200/case07/eager.json")
    assert counts == {"timing": 1, "total": 1}
    assert "stage=timing case=case07 variant=eager gpu=h200 out=outputs/timing/h200/case07/eager.json" in text


# ---------------------------------------------------------------- overrides


def test_override_run_is_tagged_and_never_touches_default_results(repo):
    ov = '["timing.reps=7"]'
    counts, text = dry(repo, "--config", "matrix=smoke", f"overrides={ov}")
    tag = re.search(r"outputs/tag/([^/]+)/timing/cpu/smoke1/eager\.json", text).group(1)
    assert re.fullmatch(r"reps-7-[0-9a-f]{8}", tag)
    assert not re.search(r"(?<!/)outputs/(correctness|timing)/", text.replace(f"outputs/tag/{tag}/", "X/"))
    assert "timing.reps=7" in text and f"tag={tag}" in text
    assert counts["timing"] == 15 and counts["report"] == 1
    _, again = dry(repo, "--config", "matrix=smoke", f"overrides={ov}")
    assert f"outputs/tag/{tag}/" in again                                # deterministic
    _, other = dry(repo, "--config", "matrix=smoke", 'overrides=["timing.reps=8"]')
    assert f"outputs/tag/{tag}/" not in other
    _, named = dry(repo, "--config", "matrix=smoke", f"overrides={ov}", "tag=mytry")
    assert "outputs/tag/mytry/timing/cpu/smoke1/eager.json" in named


def _job_tag_of(cmd: str):
    """The tag the job entry derives for a job command of a dry run (workflow.run.job_tag), by hand."""
    from hydra import compose, initialize_config_dir
    from workflow.run import job_tag
    args = shlex.split(cmd.split(" > ")[0])
    args = args[args.index("workflow.run") + 1:]
    with initialize_config_dir(config_dir=str(REPO / "config"), version_base="1.3"):
        cfg = compose("config", overrides=[a for a in args if not a.startswith(("tag=", "out="))])
    return job_tag(cfg, args)


def test_snakemake_and_a_job_by_hand_derive_the_same_tag(repo):
    """One rule (workflow/tags.py) on both sides: the matrix's own job_overrides (named by +matrix=) and the tuned
    file are not tagged, the user's overrides are, to the same tag."""
    _, text = dry(repo, "--config", "matrix=smoke")
    cmds = [ln.strip() for ln in text.splitlines() if "-m workflow.run" in ln and "variant=auto" in ln]
    assert cmds and all("+matrix=smoke" in c and "timing.reps=3" in c for c in cmds)
    assert all(_job_tag_of(c) == ("", []) for c in cmds)
    ov = '["timing.reps=7"]'
    _, text = dry(repo, "--config", "matrix=smoke", f"overrides={ov}")
    tag = re.search(r"outputs/tag/([^/]+)/timing/cpu/smoke1/eager\.json", text).group(1)
    cmd = next(ln for ln in text.splitlines() if "-m workflow.run" in ln and "variant=auto" in ln)
    assert _job_tag_of(cmd) == (tag, ["timing.reps=7"])


def test_bool_config_keys_are_true_or_false(repo):
    p = smk(repo, "-n", "--config", "ncu=maybe", check=False)
    assert p.returncode != 0 and "config ncu='maybe': expected true or false" in p.stdout + p.stderr


def test_an_invalid_result_is_moved_aside_and_regenerated(tmp_path):
    """Forged, truncated, not-a-record and another run's results (the report never counts them) are moved aside
    to <file>.invalid when the workflow is read, so the run makes them again; a valid result stays."""
    from workflow.stages.common import write_json_atomic
    repo = copy_repo(tmp_path / "repo")
    res = repo / "outputs" / "correctness" / "cpu" / "smoke1"
    res.mkdir(parents=True)
    (res / "eager.json").write_text('{"status": "ok", "passed": true}')
    (res / "nn.json").write_text("[]")
    good = json.loads((REPO / "docs/results/h200/raw/correctness/h200/case05/eager.json").read_text())
    good.update(gpu="cpu", case="smoke1", variant="eager_sdpa", impl="eager_sdpa")
    good["config"]["gate"] = {}
    write_json_atomic(res / "eager_sdpa.json", good)
    (res / "compile_default_fp32.json").write_text(json.dumps(dict(good, variant="compile_default_fp32"))[:200])
    write_json_atomic(res / "auto.json", dict(good, variant="auto", tag="reps-7-abcdef12"))
    p = smk(repo, "-n", "--config", "matrix=smoke", "cases=[smoke1]")
    text = p.stdout + p.stderr
    for v in ("eager", "nn", "compile_default_fp32", "auto"):
        assert f"outputs/correctness/cpu/smoke1/{v}.json is invalid" in text
        assert (res / f"{v}.json.invalid").exists() and not (res / f"{v}.json").exists()
    assert "moved aside" in text and "not this run's" in text
    assert (res / "eager_sdpa.json").exists()
    assert job_counts(text)["correctness"] == 4        # the four invalid ones, not the valid eager_sdpa


def test_out_of_gpu_memory_is_oom_from_the_allocator_or_the_driver():
    """A job's exception is ``oom`` where the GPU ran out of memory, through the caching allocator or through the
    driver (torch's AcceleratorError, ``CUDA error: out of memory``: the device pipeline runs ``oom`` jobs again
    alone), else ``error`` with the exception's type."""
    import torch

    from workflow.run import failure
    driver = torch.AcceleratorError("CUDA error: out of memory\nSearch for `cudaErrorMemoryAllocation' in ...")
    assert failure(driver) == ("oom", "CUDA error: out of memory")
    assert failure(torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 8 GiB"))[0] == "oom"
    assert failure(RuntimeError("CUDA error: an illegal memory access was encountered")) == (
        "error", "RuntimeError: CUDA error: an illegal memory access was encountered")
    assert failure(ValueError("out of memory"))[0] == "error"    # not the GPU's


def test_bad_override_fails_before_any_job_with_hydras_message(repo):
    p = smk(repo, "--config", "matrix=smoke", 'overrides=["variant.params.no_such_knob=4"]', "--cores", "1",
            check=False)
    assert p.returncode != 0
    err = p.stdout + p.stderr
    assert "Could not override 'variant.params.no_such_knob'" in err
    assert "rejected for variant eager" in err
    assert not (repo / "outputs" / "tag").exists()
    p = smk(repo, "-n", "--config", 'overrides=["case=case07"]', check=False)
    assert p.returncode != 0 and "chosen by the workflow" in p.stdout + p.stderr


def test_shell_metacharacters_are_rejected_or_passed_literally(repo, tmp_path):
    marker = tmp_path / "PWNED"
    # Hydra's grammar rejects $( ... ) outright, before any job
    p = smk(repo, "-n", "--config", "matrix=smoke", f'overrides=["timing.reps=$(touch {marker})"]', check=False)
    assert p.returncode != 0 and not marker.exists()
    # a quoted value with ; and $(...) reaches the job literally: shlex-quoted in the command, recorded as data
    value = f"x; touch {marker}; $(touch {marker})"
    ov = f"+note='{value}'"  # a free-form key of the job config (peers refuse unknown variant parameters)
    target_re = r"outputs/tag/([^/]+)/correctness/cpu/smoke1/eager\.json"
    _, text = dry(repo, "--config", "matrix=smoke", f"overrides={json.dumps([ov])}")
    target = re.search(target_re, text).group(0)
    cmd = next(ln for ln in text.splitlines() if "-m workflow.run" in ln and target in ln)
    assert shlex.quote(ov) in cmd
    assert ov in shlex.split(cmd)
    smk(repo, target, "--cores", "1", "--config", "matrix=smoke", f"overrides={json.dumps([ov])}")
    rec = json.loads((repo / target).read_text())
    assert rec["config"]["note"] == value and rec["status"] == "ok"
    assert not marker.exists()


def test_lint_is_clean(repo):
    p = smk(repo, "--lint")
    assert "Congratulations, your workflow is in a good condition!" in p.stdout + p.stderr


# ---------------------------------------------------------------- the ncu stage (no GPU here: its parts)


RAW_CSV = '''==PROF== Connected to process 123
"ID","Process ID","Kernel Name","Grid Size","Block Size","gpu__time_duration.sum","sm__throughput.avg.pct_of_peak_sustained_elapsed","dram__throughput.avg.pct_of_peak_sustained_elapsed","sm__warps_active.avg.pct_of_peak_sustained_active","launch__registers_per_thread","launch__shared_mem_per_block_static","launch__shared_mem_per_block_dynamic"
"","","","","","nsecond","%","%","%","register/thread","byte","byte"
"0","123","seqres_megakernel","(132, 1, 1)","(256, 1, 1)","1,234,000","71.5","12.25","24.9","168","0","98,304"
"1","123","ln_kernel","(64, 1, 1)","(128, 1, 1)","1000","10","50","60","32","512","0"
"2","123","ln_kernel","(64, 1, 1)","(128, 1, 1)","3000","20","70","40","32","512","0"
'''


def test_ncu_raw_csv_is_summarized_per_kernel():
    from workflow.stages.ncu import parse_raw_csv, summarize_kernels
    launches = parse_raw_csv(RAW_CSV)
    assert len(launches) == 3
    assert launches[0]["duration_us"] == pytest.approx(1234.0)
    assert launches[0]["shared_mem_bytes"] == 98304 and launches[0]["registers"] == 168
    ks = summarize_kernels(launches)
    assert [k["name"] for k in ks] == ["seqres_megakernel", "ln_kernel"]
    ln = ks[1]
    assert ln["launches"] == 2 and ln["duration_us"] == pytest.approx(4.0)
    assert ln["dram_throughput_pct"] == pytest.approx((50 * 1 + 70 * 3) / 4)  # duration-weighted
    assert ln["achieved_occupancy_pct"] == pytest.approx((60 * 1 + 40 * 3) / 4)


def test_ncu_missing_is_a_clear_error(tmp_path, monkeypatch):
    from omegaconf import OmegaConf
    from workflow.stages import ncu
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(ncu, "find_ncu", lambda exe: None)
    cfg = OmegaConf.create({"ncu": {"executable": "ncu", "clock_control": "none"}})
    ctx = SimpleNamespace(cfg=cfg, device=SimpleNamespace(type="cuda"))
    with pytest.raises(SystemExit, match="Nsight Compute .* is not on PATH"):
        ncu.job(ctx, tmp_path / "x.json")
    with pytest.raises(SystemExit, match="needs a CUDA GPU"):
        ncu.job(SimpleNamespace(cfg=cfg, device=SimpleNamespace(type="cpu")), tmp_path / "x.json")
    # ncu.required=false (the quick matrix): the failure becomes the recorded result, not a failed job
    cfg.ncu.required = False
    with pytest.raises(ncu.NcuError, match="not on PATH"):
        ncu.job(ctx, tmp_path / "x.json")


def test_ncu_command_leaves_clocks_alone(tmp_path):
    from omegaconf import OmegaConf
    from workflow.stages.ncu import ncu_command
    ncfg = OmegaConf.load(REPO / "config" / "ncu" / "default.yaml")
    cmd = ncu_command("/usr/bin/ncu", ncfg, tmp_path / "auto.ncu-rep", tmp_path / "cfg.yaml")
    assert cmd[cmd.index("--clock-control") + 1] == "none"
    assert cmd[cmd.index("--export") + 1] == str(tmp_path / "auto")
    assert "--profile-from-start" in cmd and "workflow.ncu_target" in cmd
    assert "dram__throughput.avg.pct_of_peak_sustained_elapsed" in cmd[cmd.index("--metrics") + 1]


# ---------------------------------------------------------------- end to end


@pytest.mark.slow
def test_smoke_matrix_end_to_end_from_a_clean_copy(tmp_path):
    """`snakemake --cores 2` on a CPU-only machine: every smoke case x variant, then the report."""
    repo = copy_repo(tmp_path / "clean")
    smk(repo, "--cores", "2")
    want = matrix_expectation("smoke")
    out = repo / "outputs" / "report" / "cpu"
    df = pd.read_csv(out / "summary.csv")
    assert set(zip(df["case"], df["variant"])) == {(c, v) for c in want["cases"] for v in want["variants"]}
    for col in ("gate", "speedup_vs_eager", "speedup_vs_compile_default", "speedup_vs_best_compile",
                "speedup_vs_best_peer"):
        assert col in df.columns
    assert set(df["gate"]) <= {"pass", "fail", "oom", "unsupported", "error"}   # nothing missing
    peers = df[df["variant"].isin(["eager", "eager_sdpa", "nn", "compile_default_fp32"])]
    assert (peers["gate"] == "pass").all(), peers[["case", "variant", "gate"]]
    assert peers["speedup_vs_eager"].notna().all()
    for f in ("report.md", "report.html", "speedup_bars.png", "time_per_case.png", "error_heatmap.png",
              "roofline.png"):
        assert (out / f).stat().st_size > 0
    assert "Headline" in (out / "report.md").read_text()
    # nothing to do on a second run
    p = smk(repo, "--cores", "2", "-n")
    assert "Nothing to be done" in p.stdout + p.stderr
    # Snakemake's own report, with the captions of workflow/report/
    smk(repo, "--report", "snakemake-report.zip")
    assert (repo / "snakemake-report.zip").stat().st_size > 0


@pytest.mark.slow
def test_a_run_with_a_failing_job_still_writes_the_report(tmp_path):
    """keep-going runs every other job; the report of what exists is built anyway (onerror), with the failed jobs
    listed and the error from their logs; the failed job leaves no result (Snakemake retries it next time)."""
    repo = copy_repo(tmp_path / "repo")
    (repo / "config" / "variant" / "broken.yaml").write_text("name: broken\nimpl: eager\nparams:\n  bogus: 1\n")
    p = smk(repo, "--cores", "2", "--config", "cases=[smoke1]", "variants=[eager,broken]", check=False)
    text = p.stdout + p.stderr
    assert p.returncode != 0 and "some jobs failed; the report of the results that exist is in" in text
    out = repo / "outputs" / "report" / "cpu"
    df = pd.read_csv(out / "summary.csv")
    assert dict(zip(df["variant"], df["gate"])) == {"eager": "pass", "broken": "missing"}
    md = (out / "report.md").read_text()
    assert "Missing results (2)" in md and "job failed: error: eager: unknown parameters ['bogus']" in md
    assert not (repo / "outputs" / "correctness" / "cpu" / "smoke1" / "broken.json").exists()
    # a forged result in its place is not taken: moved aside, the job runs again
    target = repo / "outputs" / "correctness" / "cpu" / "smoke1" / "eager.json"
    target.write_text('{"status": "ok", "passed": true}')
    smk(repo, "--cores", "1", "outputs/correctness/cpu/smoke1/eager.json", "--config", "cases=[smoke1]",
        "variants=[eager]")
    assert json.loads(target.read_text())["results"] and target.with_name("eager.json.invalid").exists()


def test_ncu_job_with_a_stand_in_ncu(tmp_path, monkeypatch):
    """The stage's plumbing without a GPU: a stand-in `ncu` that writes the report file and prints the raw
    CSV page; the job returns the per-kernel summary and leaves <out>.ncu-rep next to the JSON."""
    from omegaconf import OmegaConf
    from workflow.stages import ncu
    fake = tmp_path / "bin" / "ncu"
    fake.parent.mkdir()
    (tmp_path / "raw.csv").write_text(RAW_CSV)
    fake.write_text(f"""#!/usr/bin/env bash
case " $* " in
  *" --import "*) cat {tmp_path / 'raw.csv'} ;;
  *" --version"*) echo "NVIDIA (R) Nsight Compute Command Line Profiler"; echo "Version 2025.3.1" ;;
  *) while [ $# -gt 0 ]; do [ "$1" = --export ] && touch "$2.ncu-rep"; shift; done ;;
esac
""")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    cfg = OmegaConf.create({"ncu": OmegaConf.load(REPO / "config" / "ncu" / "default.yaml"),
                            "variant": {"name": "auto"}, "case": {"name": "case07"}})
    ctx = SimpleNamespace(cfg=cfg, device=SimpleNamespace(type="cuda"), case=SimpleNamespace(name="case07"))
    out = tmp_path / "outputs" / "ncu" / "h100_96" / "case07" / "auto.json"
    body = ncu.job(ctx, out)
    assert Path(body["ncu_rep"]) == out.with_suffix(".ncu-rep") and out.with_suffix(".ncu-rep").exists()
    assert [k["name"] for k in body["kernels"]] == ["seqres_megakernel", "ln_kernel"]
    assert body["n_launches"] == 3 and body["total_duration_us"] == pytest.approx(1238.0)
    assert body["ncu_version"] == "Version 2025.3.1"
    assert body["command"][body["command"].index("--clock-control") + 1] == "none"
