"""Tuned parameters as files (config/tuned/<gpu>/<case>.yaml), the tune stage, and hybrid's CUDA-graph option."""
import json
import os
import subprocess
import sys

import pytest
import torch

from conftest import REPO
from kernels import get_variant, load_case, make_input, make_weights, reference_forward, gate, tuning

DEFAULTS = {"a": 1, "b": "x", "tune": "committed", "tuned_file": None, "search_space": None}


def _file(tmp_path, text):
    p = tmp_path / "t.yaml"
    p.write_text(text)
    return str(p)


def test_committed_file_parameters_apply_on_top_of_the_defaults(tmp_path):
    f = _file(tmp_path, "fam:\n  params: {a: 2}\n  measured: {commit: abc1234}\n")
    mode, params, info = tuning.resolve("fam", load_case("smoke1"), "cpu", dict(DEFAULTS, tuned_file=f), DEFAULTS)
    assert mode == "committed" and params["a"] == 2 and "tuned_file" not in params
    assert info["params"] == {"a": 2} and info["measured"]["commit"] == "abc1234"


def test_a_parameter_given_explicitly_wins_over_the_file(tmp_path):
    f = _file(tmp_path, "fam:\n  params: {a: 2, b: y}\n")
    _, params, info = tuning.resolve("fam", load_case("smoke1"), "cpu", dict(DEFAULTS, a=7, tuned_file=f), DEFAULTS)
    assert params["a"] == 7 and params["b"] == "y" and info["explicit_wins"] == {"a": 7}


def test_no_file_means_the_defaults_and_a_line_that_says_how_to_tune(tmp_path, capsys):
    missing = str(tmp_path / "none.yaml")
    _, params, _ = tuning.resolve("fam", load_case("smoke1"), "cpu", dict(DEFAULTS, tuned_file=missing), DEFAULTS)
    assert params["a"] == 1
    assert "tune=search" in capsys.readouterr().err


def test_unknown_parameters_in_a_tuned_file_name_the_file_and_the_keys(tmp_path):
    f = _file(tmp_path, "fam:\n  params: {a: 2, KVS: 1, old_name: 3}\n")
    with pytest.raises(ValueError, match=r"t\.yaml.*\['KVS', 'old_name'\]"):
        tuning.resolve("fam", load_case("smoke1"), "cpu", dict(DEFAULTS, tuned_file=f), DEFAULTS)
    with pytest.raises(ValueError, match="params must be a mapping"):
        tuning.resolve("fam", load_case("smoke1"), "cpu", dict(DEFAULTS, tuned_file=_file(tmp_path, "fam: 3\n")),
                       DEFAULTS)


@pytest.mark.parametrize("mode", ["off", []])
def test_tune_off_runs_the_parameters_as_given(mode, tmp_path):
    f = _file(tmp_path, "fam:\n  params: {a: 2}\n")
    m, params, _ = tuning.resolve("fam", load_case("smoke1"), "cpu", dict(DEFAULTS, tune=mode, tuned_file=f), DEFAULTS)
    assert m == "off" and params["a"] == 1


def test_an_unknown_tune_mode_names_the_valid_ones():
    with pytest.raises(ValueError, match="committed, search, off"):
        tuning.resolve("fam", load_case("smoke1"), "cpu", dict(DEFAULTS, tune="fastest"), DEFAULTS)


def test_search_keeps_the_fastest_unless_within_the_margin_and_skips_what_does_not_fit():
    ms = {1: 1.0, 2: 0.98, 3: 0.90}

    def prepare_one(a, **_):
        if a == 4:
            raise ValueError("does not fit")
        return a
    import time

    def call(p, x):  # a configuration that takes ms[p] milliseconds (CPU: perf_counter around the call)
        time.sleep(ms[p] / 20)
    x = torch.zeros(1)
    p, info, sets = tuning.search(prepare_one, call, {"a": 1}, [{"a": 2}, {"a": 3}, {"a": 4}], 0.03,
                                  {"a"}, x, rounds=3, skip=(ValueError,))
    assert p == 3 and info["chosen_params"] == {"a": 3} and info["skipped"][0]["params"] == {"a": 4}
    p, info, _ = tuning.search(prepare_one, call, {"a": 1}, [{"a": 2}], 0.03, {"a"}, x, rounds=3)
    assert p == 1 and info["chosen"] == 0, "2% faster is within the 3% margin: keep the parameters as given"
    assert tuning.pick([1.0, 0.96, 0.95], 0.03) == 2 and tuning.pick([0.9, 0.95], 0.03) == 0


def test_search_block_round_trips_through_a_tuned_file(tmp_path):
    info = {"candidates": [{}, {"a": 2}], "median_ms": [1.0, 0.5], "chosen": 1, "chosen_params": {"a": 2}}
    block = tuning.block_from_search(info, "abc1234", "2026-12-01", "NVIDIA H200")
    path = tuning.write_tuned(tmp_path / "h200" / "case01.yaml", {"fam": block}, "a header")
    assert path.read_text().startswith("# a header")
    assert tuning.read_block(path, "fam", {"a"}) == block


def test_every_committed_tuned_file_is_valid_for_its_family():
    """A committed file with another commit's parameter names would fail at prepare on the GPU: fail here first."""
    import yaml
    files = sorted(tuning.tuned_root().glob("*/*.yaml"))
    assert files, "config/tuned/ holds the committed choices"
    for f in files:
        assert f.stem in {c for c in __import__("kernels").list_cases()}, f
        for family in yaml.safe_load(f.read_text()):
            known = set(yaml.safe_load((tuning.tuned_root().parent / "variant" / f"{family}.yaml").read_text())["params"])
            tuning.read_block(f, family, known)


def test_every_seqres_case_has_a_committed_h200_choice():
    for c in (1, 5, 6, 7, 9, 10, 11):
        assert tuning.read_block(tuning.tuned_file(load_case(c), "h200"), "seqres") is not None, c


def test_search_spaces_name_known_parameters():
    import yaml
    for space in sorted((tuning.tuned_root().parent / "search").glob("*.yaml")):
        family = space.stem.split("-")[0]
        known = set(yaml.safe_load((tuning.tuned_root().parent / "variant" / f"{family}.yaml").read_text())["params"])
        for cand in tuning.search_space(family, str(space)):
            assert set(cand) <= known, (space, cand)


def test_no_gpu_type_on_a_cpu_device():
    assert tuning.gpu_type_of_device(torch.device("cpu")) is None


def _run(*args, tmp_path):
    env = dict(os.environ, TRITON_INTERPRET="1")
    return subprocess.run([sys.executable, "-m", "workflow.run", *args, f"output_root={tmp_path}"], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=300)


def test_tune_stage_committed_writes_the_family_block_and_refuses_peers(tmp_path):
    r = _run("stage=tune", "case=smoke1", "variant=auto", "gpu=cpu", tmp_path=tmp_path)
    assert r.returncode == 0, r.stderr
    out = tmp_path / "tuned" / "cpu" / "smoke1" / "auto.yaml"
    assert out.exists() and "no committed seqres parameters" in out.read_text()
    r = _run("stage=tune", "case=smoke1", "variant=eager", "gpu=cpu", tmp_path=tmp_path)
    assert r.returncode != 0 and "tune stage is for our kernel families" in r.stderr


def test_tune_stage_copies_the_committed_h200_file(monkeypatch, tmp_path):
    from omegaconf import OmegaConf

    from workflow.stages import tune
    cfg = OmegaConf.create({"gpu": {"name": "h200"}, "variant": {"impl": "auto", "params": {"route": {}}}})
    blocks, header = tune.committed(cfg, load_case(6), None)
    assert set(blocks) == {"seqres"} and "config/tuned/h200/case06.yaml" in header
    assert blocks["seqres"] == tuning.read_block(tuning.tuned_file(load_case(6), "h200"), "seqres")


def test_a_job_with_a_tuned_file_prepares_its_parameters(tmp_path):
    """The correctness job reads the tune stage's file (variant.params.tuned_file) and records what it ran."""
    f = tmp_path / "tuned.yaml"
    f.write_text("seqres:\n  params: {block_m_ln: 8}\n")
    out = tmp_path / "r.json"
    r = _run("stage=correctness", "case=smoke1", "variant=seqres", "gpu=cpu", f"variant.params.tuned_file={f}",
             f"out={out}", "gate.scales=[1.0]", "gate.seeds=[0]", "gate.margin.inputs=1",
             "gate.margin.inputs_per_weight_seed=0", tmp_path=tmp_path)
    assert r.returncode == 0, r.stderr
    d = json.loads(out.read_text())
    assert d["passed"], d["reason"]
    assert d["prepare_info"]["tuned"]["params"] == {"block_m_ln": 8}
    assert d["prepare_info"]["params"]["block_m_ln"] == 8


def test_hybrid_cuda_graph_option_is_wired():
    """The graph path exists only on CUDA; on the CPU the option is validated, recorded, and the eager forward runs."""
    from kernels.hybrid.model import use_graph
    c2, c14 = load_case(2), load_case(14)
    assert use_graph(c2, "auto", 1 << 22) and not use_graph(c14, "auto", 1 << 22)
    assert use_graph(c14, True, 0) and not use_graph(c2, False, 1 << 30)
    with pytest.raises(ValueError, match="cuda_graph"):
        use_graph(c2, "sometimes", 1)
    case = load_case("smoke3")
    w = make_weights(case)
    v = get_variant("hybrid")
    p = v.prepare(case, w, cuda_graph=True)
    assert p.info["cuda_graph"] is False and p.graph is None and p.info["params"]["cuda_graph"] is True
    x = make_input(case, 1.0, 0)
    assert gate(v.run(p, x), reference_forward(case, w, x)).passed
    with pytest.raises(TypeError, match="unknown parameters"):
        v.prepare(case, w, cuda_graphs=True)


def test_the_gpu_type_sets_the_triton_cache_directory(monkeypatch, tmp_path):
    from omegaconf import OmegaConf

    from workflow.run import gpu_environment
    monkeypatch.delenv("TRITON_CACHE_DIR", raising=False)
    gpu_environment(OmegaConf.create({"gpu": {"device": "cuda", "triton_cache_dir": str(tmp_path / "c")}}))
    assert os.environ["TRITON_CACHE_DIR"] == str(tmp_path / "c")
    monkeypatch.setenv("TRITON_CACHE_DIR", "/site/cache")  # the job's own environment wins
    gpu_environment(OmegaConf.create({"gpu": {"device": "cuda", "triton_cache_dir": "/elsewhere"}}))
    assert os.environ["TRITON_CACHE_DIR"] == "/site/cache"


def test_no_tuned_file_is_said_once_per_process(tmp_path, capsys):
    """A missing tuned file means the family defaults and one log line naming the file and how to tune, not one
    per prepare (the margin check prepares again for every weight seed)."""
    from kernels import load_case
    from kernels.dag.host import DEFAULTS
    missing = tmp_path / "none.yaml"
    for _ in range(3):
        mode, params, info = tuning.resolve("dag", load_case("smoke2"), "cpu", {"tuned_file": str(missing)}, DEFAULTS)
        assert mode == "committed" and info["file"] == str(missing) and "params" not in info
    err = capsys.readouterr().err
    assert err.count("no tuned parameters") == 1 and "tune=search" in err
