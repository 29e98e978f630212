"""The Slurm path against a real one-node Slurm cluster (job-scripts/cluster.sh): the sbatch job scripts
and `snakemake --profile slurm` on the smoke matrix, checked with sacct.

Run by .ci/slurm.sh (cluster up -> `pytest -m slurm` -> cluster down). These tests never start the
cluster themselves; without one they are skipped with the reason. By hand:

    sudo bash job-scripts/cluster.sh up && export SLURM_CONF=/var/lib/mkh-slurm/etc/slurm.conf
    pytest -m slurm tests/test_slurm.py

Every run happens in a private copy of the working tree (tracked and untracked, not ignored files), so a
Snakemake run here never locks or overwrites the results of the checkout it was started from.

CI override: the smoke matrix runs every stage on gpu=cpu (no Slurm partition). Each stage's jobs are
sent to the partition and gres of the stage's default GPU type (SPEC §6: correctness -> h100_mig47,
timing -> h200) with --set-resources taken from config/gpu/<type>.yaml, i.e. to the fake GPUs that
cluster.sh generated from the same files; the jobs still compute on the CPU.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parents[1]
STATE_DIR = Path(os.environ.get("MKH_SLURM_DIR", "/var/lib/mkh-slurm"))
STAGE_GPU = {"correctness": "h100_mig47", "timing": "h200", "ncu": "h100_96"}  # SPEC §6 defaults
TERMINAL = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "BOOT_FAIL",
            "DEADLINE", "PREEMPTED")
SNAKEMAKE_TIMEOUT = int(os.environ.get("MKH_SLURM_TEST_TIMEOUT", "1800"))
# For a quicker look by hand: a subset of the smoke matrix's variants (eager, nn and auto at least: the tests
# use the first two, the report needs auto), e.g.
# MKH_SLURM_TEST_VARIANTS=eager,nn,auto. CI runs the whole smoke matrix.
TEST_VARIANTS = os.environ.get("MKH_SLURM_TEST_VARIANTS", "")


# ---------------------------------------------------------------- helpers


def gpu_slurm(gpu: str) -> dict:
    with open(REPO / "config" / "gpu" / f"{gpu}.yaml") as f:
        return yaml.safe_load(f)["slurm"]


def gres_type(gres: str) -> str:
    return gres.split(":")[1]


def run(cmd, env, cwd=None, timeout=120, check=False) -> subprocess.CompletedProcess:
    r = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise AssertionError(f"{cmd} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
    return r


def sacct(env, *args) -> list[dict]:
    """Allocation lines only (-X: no .batch steps) as dicts."""
    fields = ["JobID", "JobName", "Partition", "Account", "State", "ExitCode", "AllocTRES", "Comment", "Submit"]
    r = run(["sacct", "-n", "-P", "-X", "-o", ",".join(fields), *args], env, check=True)
    return [dict(zip(fields, line.split("|"))) for line in r.stdout.splitlines() if line.strip()]


def recorded(row: dict) -> bool:
    """slurmdbd has the job's final record: a terminal state and its partition (on a fresh cluster the
    partition of the first job can reach sacct a moment after its state)."""
    return row["State"].split()[0] in TERMINAL and bool(row["Partition"])


def wait_jobs(env, job_ids, timeout=900) -> dict[str, dict]:
    deadline = time.time() + timeout
    while True:
        rows = {r["JobID"]: r for r in sacct(env, "-j", ",".join(job_ids))}
        if all(j in rows and recorded(rows[j]) for j in job_ids):
            return rows
        if time.time() > deadline:
            raise AssertionError(f"jobs {job_ids} not finished after {timeout} s: {rows}")
        time.sleep(2)


def copy_tree(dst: Path) -> Path:
    """The working tree (tracked + untracked, not ignored) copied to ``dst``; .venv linked, not copied."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO,
                           capture_output=True, check=True).stdout.decode().split("\0")
    for rel in filter(None, files):
        src = REPO / rel
        if not (src.exists() or src.is_symlink()):
            continue  # deleted in the working tree
        out = dst / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            out.symlink_to(os.readlink(src))
        elif src.is_file():
            shutil.copy2(src, out)
    (dst / "job-scripts" / "outputs").mkdir(parents=True, exist_ok=True)
    if (REPO / ".venv").exists():
        (dst / ".venv").symlink_to(REPO / ".venv")
    return dst


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def snapshot(root: Path) -> dict[str, tuple[str, int]]:
    """Every result file under outputs/ (no logs): path -> (sha256, mtime_ns)."""
    return {str(p.relative_to(root)): (digest(p), p.stat().st_mtime_ns)
            for p in sorted((root / "outputs").rglob("*")) if p.is_file() and "logs" not in p.parts}


# ---------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def slurm_env():
    """The cluster's environment (SLURM_CONF), or skip: the cluster is started by .ci/slurm.sh, not here."""
    def unavailable(reason: str):
        msg = (f"one-node Slurm cluster not available: {reason}. Start it with "
               "`sudo bash job-scripts/cluster.sh up` and export the SLURM_CONF it prints "
               "(CI: .ci/slurm.sh does both)")
        if os.environ.get("MKH_SLURM_REQUIRED") == "1":
            pytest.fail(msg)
        pytest.skip(msg)

    for tool in ("sinfo", "sacct", "sbatch"):
        if not shutil.which(tool):
            unavailable(f"`{tool}` not installed")
    conf = os.environ.get("SLURM_CONF") or str(STATE_DIR / "etc" / "slurm.conf")
    if not Path(conf).is_file():
        unavailable(f"no slurm.conf at {conf}")
    env = {**os.environ, "SLURM_CONF": conf}
    for cmd in (["sinfo", "-h", "-o", "%P %a %T"], ["sacct", "-n", "-X", "-S", "now-1minutes"]):
        try:
            r = run(cmd, env, timeout=30)
        except subprocess.TimeoutExpired:
            unavailable(f"`{' '.join(cmd)}` timed out")
        if r.returncode != 0:
            unavailable(f"`{' '.join(cmd)}` failed: {r.stderr.strip()[-300:]}")
    return env


@pytest.fixture(scope="module")
def sbatch_tree(tmp_path_factory):
    return copy_tree(tmp_path_factory.mktemp("sbatch") / "repo")


# ---------------------------------------------------------------- the cluster itself


def test_cluster_partitions_and_gres_come_from_the_gpu_configs(slurm_env):
    """Every config/gpu/*.yaml with a partition has that partition on the cluster, offering its gres type."""
    r = run(["sinfo", "-h", "-o", "%P|%G|%a"], slurm_env, check=True)
    offered = {p.rstrip("*"): (g, a) for p, g, a in (line.split("|") for line in r.stdout.splitlines())}
    n = 0
    for path in sorted((REPO / "config" / "gpu").glob("*.yaml")):
        slurm = gpu_slurm(path.stem)
        if slurm.get("partition") is None:
            continue
        n += 1
        assert slurm["partition"] in offered, (path.name, offered)
        gres, avail = offered[slurm["partition"]]
        assert avail == "up"
        if slurm.get("gres"):
            assert f"gpu:{gres_type(slurm['gres'])}:" in gres, (path.name, gres)
    assert n > 0
    status = run(["bash", str(REPO / "job-scripts" / "cluster.sh"), "status"], slurm_env)
    assert status.returncode == 0, status.stderr


# ---------------------------------------------------------------- job-scripts/*.sbatch


@pytest.mark.parametrize("stage", ["correctness", "timing", "ncu"])
def test_sbatch_defaults_match_the_gpu_configs(stage):
    """Each job script's #SBATCH partition/gres are those of its stage's default GPU type."""
    text = (REPO / "job-scripts" / f"{stage}.sbatch").read_text()
    directives = dict(re.findall(r"^#SBATCH --([a-z-]+)=(\S+)", text, re.M))
    slurm = gpu_slurm(STAGE_GPU[stage])
    assert directives["partition"] == slurm["partition"]
    assert directives["gres"] == slurm["gres"]
    assert directives["output"] == "job-scripts/outputs/%x-%j.log"


def test_sbatch_correctness_script_runs_the_job_entry(slurm_env, sbatch_tree):
    """`sbatch job-scripts/correctness.sbatch case=smoke1 variant=eager gpu=cpu` runs in the mig partition
    on an h100_mig47 gres and writes outputs/correctness/cpu/smoke1/eager.json with passed: true."""
    slurm = gpu_slurm("h100_mig47")
    # an override with shell metacharacters must reach Hydra literally; this one only names the seeds
    cmd = ["sbatch", "--parsable", f"--partition={slurm['partition']}", f"--gres={slurm['gres']}",
           "job-scripts/correctness.sbatch", "case=smoke1", "variant=eager", "gpu=cpu", "gate.seeds=[0, 1]"]
    r = run(cmd, slurm_env, cwd=sbatch_tree, check=True)
    job = r.stdout.strip().split(";")[0]
    row = wait_jobs(slurm_env, [job], timeout=600)[job]
    log = sbatch_tree / "job-scripts" / "outputs" / f"correctness-{job}.log"
    assert log.is_file(), f"no Slurm log {log}"
    assert row["State"] == "COMPLETED", f"{row}\n{log.read_text()[-3000:]}"
    assert row["Partition"] == slurm["partition"]
    assert f"gres/gpu:{gres_type(slurm['gres'])}=1" in row["AllocTRES"], row["AllocTRES"]
    assert "gres/gpu=1" in row["AllocTRES"]
    result = sbatch_tree / "outputs" / "correctness" / "cpu" / "smoke1" / "eager.json"
    assert result.is_file(), f"no result {result}; log:\n{log.read_text()[-3000:]}"
    rec = json.loads(result.read_text())
    assert rec["passed"] is True and rec["status"] == "ok", rec.get("reason")
    assert (rec["stage"], rec["case"], rec["variant"], rec["gpu"]) == ("correctness", "smoke1", "eager", "cpu")
    assert rec["config"]["gate"]["seeds"] == [0, 1]
    text = log.read_text()
    assert "CUDA_VISIBLE_DEVICES=" in text and "CUDA_VISIBLE_DEVICES=unset" not in text


def test_sbatch_script_rejects_another_stage(slurm_env, sbatch_tree):
    r = run(["bash", "job-scripts/run-stage.sh", "timing", "h200", "stage=correctness"], slurm_env, cwd=sbatch_tree)
    assert r.returncode == 2 and "runs stage=timing" in r.stderr


# ---------------------------------------------------------------- snakemake --profile slurm


class Workflow:
    """`snakemake --profile slurm` on the smoke matrix in a private copy of the tree."""

    def __init__(self, root: Path, env: dict):
        self.root, self.env = root, env
        # every job of these runs is named <prefix>_<run uuid>: sacct rows of other users are told apart
        self.prefix = f"mkhtest-{os.getpid()}-{int(time.time())}"
        config = ["matrix=smoke"] + ([f"variants=[{TEST_VARIANTS}]"] if TEST_VARIANTS else [])
        self.ci_args = ["--config", *config, "--slurm-init-seconds-before-status-checks", "3",
                        "--slurm-jobname-prefix", self.prefix, "--set-resources"]
        for stage in ("correctness", "timing"):
            slurm = gpu_slurm(STAGE_GPU[stage])
            self.ci_args += [f"{stage}:slurm_partition={slurm['partition']}", f"{stage}:gres={slurm['gres']}"]

    def snakemake(self, *targets: str) -> tuple[subprocess.CompletedProcess, dict[str, str], list[dict]]:
        """Run it; returns the process, {slurm job id: slurm log path} it submitted, and sacct's rows of
        every job of this test's runs submitted to the cluster during the run."""
        start = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() - 1))
        cmd = [sys.executable, "-m", "snakemake", "--profile", "slurm", *self.ci_args, "--", *targets]
        r = run(cmd, self.env, cwd=self.root, timeout=SNAKEMAKE_TIMEOUT)
        out = r.stdout + r.stderr
        (self.root / f"snakemake-{start}.log").write_text(out)
        submitted = dict(re.findall(r"submitted with SLURM jobid (\d+) \(log: ([^)]+)\)", out))
        deadline = time.time() + 60
        while True:
            rows = [row for row in sacct(self.env, "-S", start) if row["JobName"].startswith(self.prefix + "_")]
            if all(recorded(row) for row in rows) or time.time() > deadline:
                return r, submitted, rows
            time.sleep(1)

    def expected_jobs(self) -> dict[str, int]:
        r = run([sys.executable, "-m", "snakemake", "--profile", "slurm", *self.ci_args, "-n", "--forceall"],
                self.env, cwd=self.root, timeout=300, check=True)
        table = re.search(r"job\s+count\n[-\s]+\n(.*?)\ntotal", r.stdout, re.S)
        assert table, r.stdout[-2000:]
        return {k: int(v) for k, v in re.findall(r"^(\S+)\s+(\d+)$", table.group(1), re.M)}


def rule_of(row: dict) -> tuple[str, str]:
    """(rule, wildcards) from the plugin's --comment rule_<rule>_wildcards_<w1>_<w2>..."""
    m = re.fullmatch(r"rule_(correctness|timing|ncu|report)(?:_wildcards_(.*))?", row["Comment"])
    assert m, f"job {row['JobID']} has no rule comment: {row}"
    return m.group(1), m.group(2) or ""


def tail(r: subprocess.CompletedProcess, n=4000) -> str:
    return (r.stdout + r.stderr)[-n:]


@pytest.fixture(scope="module")
def wf(slurm_env, tmp_path_factory):
    return Workflow(copy_tree(tmp_path_factory.mktemp("profile") / "repo"), slurm_env)


@pytest.fixture(scope="module")
def first_run(wf):
    expected = wf.expected_jobs()
    r, submitted, rows = wf.snakemake()
    return expected, r, submitted, rows


def test_profile_runs_the_smoke_matrix_on_the_stage_partitions(wf, first_run):
    """Every job of the smoke matrix is submitted, completes, and ran in the partition and with the gres
    of its stage's GPU type; the report is built where Snakemake runs."""
    expected, r, submitted, rows = first_run
    assert r.returncode == 0, tail(r)
    n_slurm = expected.get("correctness", 0) + expected.get("timing", 0)
    assert n_slurm > 0 and len(submitted) == n_slurm, (expected, submitted)
    assert {row["JobID"] for row in rows} == set(submitted), "jobs on the cluster != jobs Snakemake submitted"
    seen = {"correctness": 0, "timing": 0}
    for row in rows:
        rule, _ = rule_of(row)
        slurm = gpu_slurm(STAGE_GPU[rule])
        assert row["State"] == "COMPLETED", row
        assert row["Partition"] == slurm["partition"], row
        assert f"gres/gpu:{gres_type(slurm['gres'])}=1" in row["AllocTRES"], row
        assert row["Account"] == "mkh", row
        seen[rule] += 1
        log = Path(submitted[row["JobID"]])
        assert log.is_file() and log.is_relative_to(wf.root / "job-scripts" / "outputs"), log
    assert seen == {"correctness": expected["correctness"], "timing": expected["timing"]}
    report = wf.root / "outputs" / "report" / "cpu"
    for name in ("summary.csv", "report.md", "report.html"):
        assert (report / name).is_file() and (report / name).stat().st_size > 0, name
    for stage in ("correctness", "timing"):
        results = list((wf.root / "outputs" / stage / "cpu").rglob("*.json"))
        assert len(results) == expected[stage]
        for p in results:
            rec = json.loads(p.read_text())
            assert rec["stage"] == stage and "passed" in rec and "status" in rec, p


def test_rerun_submits_nothing(wf, first_run):
    assert first_run[1].returncode == 0, "first run failed"
    before = snapshot(wf.root)
    r, submitted, rows = wf.snakemake()
    assert r.returncode == 0, tail(r)
    assert submitted == {} and rows == [], (submitted, rows)
    assert "Nothing to be done" in r.stdout + r.stderr, tail(r)
    assert snapshot(wf.root) == before


def test_deleted_result_is_the_only_job_resubmitted(wf, first_run):
    assert first_run[1].returncode == 0, "first run failed"
    target = wf.root / "outputs" / "timing" / "cpu" / "smoke2" / "eager.json"
    before = snapshot(wf.root)
    target.unlink()
    r, submitted, rows = wf.snakemake()
    assert r.returncode == 0, tail(r)
    assert len(submitted) == 1 and len(rows) == 1, (submitted, rows)
    (row,) = rows
    assert rule_of(row) == ("timing", "cpu_smoke2_eager"), row
    assert row["State"] == "COMPLETED" and row["Partition"] == gpu_slurm("h200")["partition"], row
    assert json.loads(target.read_text())["case"] == "smoke2"
    after = snapshot(wf.root)
    rel = str(target.relative_to(wf.root))
    changed = {k for k in before if before[k] != after.get(k)}
    # the rebuilt result, and the report that reads it (a local rule, never submitted)
    assert rel in changed and all(k == rel or "/report/" in k for k in changed), changed


def test_failing_job_is_reported_with_its_slurm_log_and_leaves_no_result(wf, first_run):
    """A job that fails inside Slurm (a full-size case asked of the CPU GPU type: the job entry refuses
    it and exits non-zero) is reported by Snakemake with its Slurm log under job-scripts/outputs/, leaves
    no result file, and the other job of the same run, and every earlier result, are intact."""
    assert first_run[1].returncode == 0, "first run failed"
    bad = wf.root / "outputs" / "correctness" / "cpu" / "case01" / "eager.json"
    good = wf.root / "outputs" / "correctness" / "cpu" / "smoke3" / "nn.json"
    good.unlink()
    before = snapshot(wf.root)
    r, submitted, rows = wf.snakemake(str(bad.relative_to(wf.root)), str(good.relative_to(wf.root)))
    out = r.stdout + r.stderr
    assert r.returncode != 0, tail(r)
    assert len(submitted) == 2 and len(rows) == 2, (submitted, rows)
    by_rule = {rule_of(row): row for row in rows}
    failed = by_rule[("correctness", "cpu_case01_eager")]
    assert failed["State"] == "FAILED" and failed["ExitCode"] != "0:0", failed
    assert failed["Partition"] == gpu_slurm("h100_mig47")["partition"], failed
    assert by_rule[("correctness", "cpu_smoke3_nn")]["State"] == "COMPLETED"
    log = Path(submitted[failed["JobID"]])
    assert log.is_relative_to(wf.root / "job-scripts" / "outputs") and log.is_file(), log
    assert re.search(r"Error in rule correctness:.*?" + re.escape(str(log)), out, re.S), tail(r)
    job_log = wf.root / "outputs" / "logs" / "correctness" / "cpu" / "case01" / "eager.log"
    assert "full-size case" in job_log.read_text(), job_log.read_text()[-2000:]
    # no result, and nothing that looks like one (e.g. a temp file of the atomic writer)
    assert not bad.exists()
    assert not bad.parent.exists() or not list(bad.parent.iterdir()), list(bad.parent.iterdir())
    # the other job of this run wrote a valid result; everything from before is untouched
    assert json.loads(good.read_text())["status"] == "ok"
    after = snapshot(wf.root)
    assert {k: v for k, v in after.items() if k != str(good.relative_to(wf.root))} == before
