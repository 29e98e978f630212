"""The job entry and its stages: config composition, bad input, guards against cheating variants, schemas."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir

from conftest import GATE, REPO, SEEDS
from kernels import Variant, list_cases, load_case, make_weights
from workflow.run import run_job
from workflow.stages.correctness import check_variant

CONFIG = os.path.join(REPO, "config")


def _compose(*overrides):
    with initialize_config_dir(config_dir=CONFIG, version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides))


def _groups(name):
    return sorted(p.stem for p in Path(CONFIG, name).glob("*.yaml"))


@pytest.mark.parametrize("group", ["case", "variant", "gpu", "gate", "timing", "ncu"])
def test_every_config_of_every_group_composes(group):
    for option in _groups(group):
        cfg = _compose(f"{group}={option}")
        assert cfg[group] is not None
        if group == "variant":
            assert cfg.variant.name == option and "params" in cfg.variant and "impl" in cfg.variant
        if group == "gpu":
            assert {"partition", "gres", "runtime", "mem_mb"} <= set(cfg.gpu.slurm)
            assert {"fp32_tflops", "tf32_tflops", "bf16_tflops", "hbm_tbps"} <= set(cfg.gpu.ceilings)
    if group == "case":
        assert _groups("case") == sorted(list_cases())


def _run_cli(*args, cwd=REPO):
    env = dict(os.environ, TRITON_INTERPRET="1")
    return subprocess.run([sys.executable, "-m", "workflow.run", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("args, message", [
    (["case=case99"], "Available options in 'case'"),
    (["variant=fastest"], "Available options in 'variant'"),
    (["gpu=a100"], "Available options in 'gpu'"),
    (["stage=train"], "valid: tune, correctness, timing, ncu"),
    (["variant.params.num_warps=4"], "Key 'num_warps' is not in struct"),
    (["case=[oops"], "no viable alternative"),
    (["case=case07", "gpu=cpu"], "gpu=cpu runs smoke cases only"),
])
def test_bad_input_fails_fast_naming_the_fix(args, message, tmp_path):
    r = _run_cli(*args, f"output_root={tmp_path}")
    assert r.returncode != 0
    assert message in r.stderr + r.stdout
    assert not list(tmp_path.rglob("*.json")), "a rejected job must not write a result"


def test_readme_smoke_command_writes_a_passing_result(tmp_path):
    out = tmp_path / "r.json"
    r = _run_cli("stage=correctness", "case=smoke1", "variant=eager", "gpu=cpu", f"out={out}")
    assert r.returncode == 0, r.stderr
    d = json.loads(out.read_text())
    assert d["passed"] and d["status"] == "ok" and len(d["results"]) == 14


# --- cheating variants must be caught --------------------------------------------------------------

@pytest.fixture
def honest():
    """The right answer for smoke1 (what a cheating variant starts from)."""
    from kernels.reference import reference_forward
    c = load_case("smoke1")
    w = make_weights(c)
    return lambda x: reference_forward(c, w, x)


def _fake(name, make_run):
    return Variant(name, prepare=lambda c, w: None, run=make_run)


def _check(variant, name="smoke1"):
    c = load_case(name)
    w = make_weights(c)
    return check_variant(c, w, variant, None, [1e-3, 1.0, 1e3], SEEDS, GATE.atol, GATE.rtol, torch.device("cpu"))


def test_honest_variant_passes_every_guard(honest):
    r = _check(_fake("honest", lambda p, x: honest(x)))
    assert r["passed"] and all(v for k, v in r["guards"].items() if k != "poisoned_allocator")


def test_result_reuse_is_caught(honest):
    cache = {}
    def run(p, x):  # computes once, then returns the first answer forever
        if "y" not in cache:
            cache["y"] = honest(x)
        return cache["y"]
    r = _check(_fake("reuse", run))
    assert not r["passed"] and not r["guards"]["distinct_outputs"]


def test_zeros_are_caught():
    r = _check(_fake("zeros", lambda p, x: torch.zeros_like(x)))
    assert not r["passed"] and r["worst"]["max_abs"] > 0.1


def test_uninitialised_output_is_caught():
    r = _check(_fake("nan", lambda p, x: torch.full_like(x, float("nan"))))
    assert not r["passed"] and not r["guards"]["finite"]


def test_input_mutation_is_caught(honest):
    def run(p, x):
        y = honest(x)
        x.mul_(0.5)  # scribbles on its input after computing the right answer
        return y
    r = _check(_fake("mutate", run))
    assert not r["passed"] and not r["guards"]["input_unchanged"]


def test_output_aliasing_the_input_is_caught(honest):
    def run(p, x):
        y = honest(x)
        x.copy_(y)  # returns its input buffer, overwritten with the answer
        return x
    r = _check(_fake("alias", run))
    assert not r["passed"] and (not r["guards"]["no_alias"] or not r["guards"]["input_unchanged"])


def _job_with_alternates(honest, alt_runs):
    """The correctness job of a variant whose prepare autotuned: the chosen configuration is honest, the
    alternates (``Variant.alternates``) run ``alt_runs``; each prepared object is the run function itself."""
    from types import SimpleNamespace
    from workflow.stages import correctness
    made = []

    def alternates(prepared, weights):
        return [(f"cand{i}", lambda r=r: made.append(r) or r) for i, r in enumerate(alt_runs)]

    v = Variant("tuned", prepare=lambda c, w: None, run=lambda p, x: p(x), alternates=alternates)
    c = load_case("smoke1")
    cfg = SimpleNamespace(gate=SimpleNamespace(scales=[1e-3, 1.0], seeds=[0], atol=GATE.atol, rtol=GATE.rtol))
    ctx = SimpleNamespace(cfg=cfg, case=c, weights=make_weights(c), variant=v, prepared=honest,
                          device=torch.device("cpu"), out_path=None)
    body = correctness.job(ctx)
    assert len(made) == len(alt_runs)  # each alternate prepared (once) and gated
    return body


def test_every_autotuning_candidate_is_gated(honest):
    body = _job_with_alternates(honest, [honest, honest])
    assert body["passed"] and [a["params"] for a in body["alternates"]] == ["cand0", "cand1"]
    assert all(a["passed"] for a in body["alternates"])


def test_a_failing_autotuning_candidate_fails_the_job(honest):
    body = _job_with_alternates(honest, [honest, lambda x: honest(x) * 1.5])
    assert not body["passed"] and [a["passed"] for a in body["alternates"]] == [True, False]
    assert "autotuning candidate cand1 failed the gate" in body["reason"]


def test_seqres_alternates_are_the_candidates_not_chosen():
    """``seqres.alternates`` re-prepares the recorded candidates other than the chosen one (GPU ``tune`` records
    them; here they are set by hand and prepared lazily, in the interpreter when TRITON_INTERPRET is set)."""
    from kernels.seqres.host import SeqresPrepared, alternates
    c = load_case("smoke1")
    p = SeqresPrepared(case=c, tensors=[], scratch={}, flags=None, err=None, grid=(1,), meta={}, launch={},
                       trace=None, qk_scale=1.0, spin_limit=0)
    assert alternates(p, None) == []  # not autotuned
    p.info["tune"] = {"chosen": 1}
    p.tune_sets = [({}, {"tune": "off"}), ({"block_n": 64}, {"block_n": 64, "tune": "off"}),
                   ({"block_kv": 16}, {"block_kv": 16, "tune": "off"})]
    assert [label for label, _ in alternates(p, None)] == ["{}", "{'block_kv': 16}"]


# --- result schemas -------------------------------------------------------------------------------

ENV_KEYS = {"git_commit", "hostname", "torch", "triton", "cuda", "gpu_name", "python"}


def test_correctness_json_schema(tmp_path):
    cfg = _compose("stage=correctness", "case=smoke2", "variant=eager_sdpa", "gpu=cpu", f"output_root={tmp_path}")
    rec = run_job(cfg)
    path = tmp_path / "correctness" / "cpu" / "smoke2" / "eager_sdpa.json"
    assert json.loads(path.read_text()) == json.loads(json.dumps(rec, default=str))
    assert rec["schema"] == "mkh.correctness/1" and rec["status"] == "ok" and rec["passed"]
    assert {"case", "variant", "impl", "gpu", "params", "results", "guards", "worst", "reference",
            "tolerance", "env", "config", "wall_s"} <= set(rec)
    assert len(rec["results"]) == 14
    assert {"scale", "seed", "passed", "max_abs", "max_rel", "frac_failing", "max_over_tol"} <= set(rec["results"][0])
    assert ENV_KEYS <= set(rec["env"]) and rec["config"]["case"]["name"] == "smoke2"
    assert not list(path.parent.glob(".*.tmp")), "atomic write leaves no temp file"


def test_timing_json_schema(tmp_path):
    cfg = _compose("stage=timing", "case=smoke1", "variant=eager", "gpu=cpu", f"output_root={tmp_path}",
                   "timing.reps=12", "timing.anchor_reps=12")
    rec = run_job(cfg)
    assert rec["schema"] == "mkh.timing/1" and rec["status"] == "ok" and rec["passed"]
    assert {"median_ms", "p20_ms", "p80_ms", "n", "warmup", "anchor", "anchor_ratio", "post_check",
            "tflops", "gbps", "peak_bytes", "clocks_before", "clocks_after", "flags", "env", "protocol"} <= set(rec)
    assert rec["n"] == 12 and rec["p20_ms"] <= rec["median_ms"] <= rec["p80_ms"]
    assert rec["warmup"]["calls"] >= 10 and rec["warmup"]["ms"] >= 100
    assert rec["anchor"]["name"] == "eager_sdpa" and rec["anchor"]["n"] == 12
    assert rec["post_check"]["passed"]
    assert rec["queue_drained"] == [None] * 12 and rec["drained_calls"] is None   # CPU: no queue to drain


class _Ev:
    def __init__(self, done):
        self.done = done

    def query(self):
        return self.done


def test_calls_are_split_by_the_state_of_the_gpu_queue():
    """``queue_was_empty`` reads the previous call's end event (CUDA tokens; None on the CPU and for the first call);
    the timing stage splits the variant's calls by it and flags two groups whose medians differ by more than 10%."""
    from kernels.timing import queue_was_empty, time_calls
    from workflow.stages.timing import queue_split
    assert queue_was_empty((_Ev(True), _Ev(True))) is True and queue_was_empty((_Ev(True), _Ev(False))) is False
    assert queue_was_empty(0.3) is None and queue_was_empty(None) is None
    drained = {}
    times = time_calls({"a": lambda: 1, "b": lambda: 2}, None, 3, device="cpu", drained=drained)
    assert drained == {"a": [None] * 3, "b": [None] * 3} and len(times["a"]) == 3
    assert queue_split([0.4, 0.5], [None, None]) == ({"drained_calls": None}, None)
    t = [0.44, 0.56, 0.44, 0.55, 0.43, 0.56]
    out, flag = queue_split(t, [None, True, False, True, False, True])
    assert out == {"drained_calls": 3, "median_ms_drained": 0.56, "median_ms_queued": 0.435}
    assert flag.startswith("3 of 5 calls found the GPU's queue drained: median 0.560 ms against 0.435 ms")
    assert queue_split(t, [False] * 6)[1] is None and queue_split([0.44, 0.45], [True, False])[1] is None


def test_an_unsupported_case_writes_a_result_saying_so(tmp_path):
    cfg = _compose("stage=correctness", "case=smoke1", "variant=auto", "gpu=cpu", f"output_root={tmp_path}",
                   "variant.params.route.seqres=no_such_variant")
    rec = run_job(cfg)
    assert rec["status"] == "unsupported" and not rec["passed"] and "no_such_variant" in rec["reason"]


def test_tagged_runs_do_not_overwrite_default_results(tmp_path):
    from workflow.run import result_path
    a = result_path(_compose("case=smoke1", f"output_root={tmp_path}"))
    b = result_path(_compose("case=smoke1", f"output_root={tmp_path}", "tag=w4"))
    assert a != b and "tag/w4" in str(b)


def test_no_family_failed_to_import():
    from kernels.families import IMPORT_ERRORS
    assert IMPORT_ERRORS == {}


def test_git_commit_prefers_the_explicit_commit(monkeypatch):
    """A copied tree (lent GPU box) may carry a stale .git: $MKH_GIT_COMMIT, when set, is what is recorded."""
    from workflow.stages.common import git_commit
    monkeypatch.setenv("MKH_GIT_COMMIT", "0123abc")
    assert git_commit() == "0123abc"
    monkeypatch.delenv("MKH_GIT_COMMIT")
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert git_commit().startswith(head or "unknown")
