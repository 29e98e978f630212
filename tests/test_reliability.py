"""Bad input gets a clear error, results are never overwritten or forged (issue 32): the tries of the issue, each
as a test. Kernel runs are avoided: every check here fails before a kernel launches (or is one cheap CPU run)."""
import json
import os
import subprocess
import sys
from dataclasses import replace

import pytest
import torch
from hydra import compose, initialize_config_dir

from conftest import REPO
from kernels import gate, get_variant, list_variants, load_case, make_input, make_weights
from kernels.validate import ParameterError, WeightsError, check_weights
from workflow.run import job_tag, result_path, run_job
from workflow.schemas import check_file, validate_record
from workflow.tags import derive_tag, tagged_overrides

CONFIG = os.path.join(REPO, "config")
SMOKE_FOR = {"seqres": "smoke1", "dag": "smoke2", "hybrid": "smoke3"}


def _compose(*overrides):
    with initialize_config_dir(config_dir=CONFIG, version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides))


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "workflow.run", *args], cwd=REPO, capture_output=True, text=True,
                          env=dict(os.environ, TRITON_INTERPRET="1"), timeout=300)


# ---------------------------------------------------------------- 1. override runs are isolated by construction


def test_a_by_hand_override_goes_under_its_tag_and_the_default_result_is_untouched(tmp_path):
    """The issue's try (an override of a kernel parameter by hand) on a cheap job: the result lands under
    tag/<derived tag>/, validates against its schema, records the override; the default path stays empty."""
    ov = ["gate.scales=[1.0]", "gate.seeds=[0]"]
    r = _cli("stage=correctness", "case=smoke1", "variant=eager", "gpu=cpu", f"output_root={tmp_path}", *ov)
    assert r.returncode == 0, r.stderr
    tag = derive_tag(ov)
    path = tmp_path / "tag" / tag / "correctness" / "cpu" / "smoke1" / "eager.json"
    rec = check_file(path, "correctness", gpu="cpu", case="smoke1", variant="eager", tag=tag)
    assert rec["overrides"] == ov and rec["passed"]
    assert not (tmp_path / "correctness").exists()


def test_the_issues_override_gets_a_tag_by_hand_with_plus_and_double_plus():
    sel = ["stage=timing", "case=smoke1", "variant=auto", "gpu=cpu"]
    for ov in ("+variant.params.seqres.block_m=16", "++variant.params.seqres.block_m=16", "timing.reps=7",
               "gate.atol=0.01", "~variant.params.hybrid"):
        cfg = _compose(*sel, ov)
        tag, tagged = job_tag(cfg, [*sel, ov])
        assert tagged == [ov] and tag == derive_tag([ov])
        assert f"tag/{tag}/timing/cpu/smoke1/auto.json" in str(result_path(cfg, tag))


def test_an_override_that_restates_the_default_is_not_an_override_run():
    sel = ["stage=correctness", "case=smoke1", "variant=eager", "gpu=cpu"]
    assert job_tag(_compose(*sel, "gate.seeds=[0, 1]"), [*sel, "gate.seeds=[0, 1]"]) == ("", [])
    assert job_tag(_compose(*sel, "gate.seeds=[0, 2]"), [*sel, "gate.seeds=[0, 2]"])[0] != ""


def test_plumbing_and_the_matrix_own_overrides_are_not_tagged():
    """What Snakemake passes to every job (the tuned file of the tune stage, the tune mode, the matrix's
    job_overrides with +matrix=) leaves a default result default, by hand as under Snakemake."""
    smoke = _compose("+matrix=smoke").matrix.job_overrides
    plumbing = ["variant.params.tuned_file=outputs/tuned/h200/case05/auto.yaml", "variant.params.tune=committed",
                "+matrix=smoke", "out=outputs/timing/cpu/smoke1/auto.json", "tag=x", *smoke]
    assert tagged_overrides(plumbing, smoke) == []
    cfg = _compose("stage=timing", "case=smoke1", "variant=auto", "gpu=cpu", "+matrix=smoke", *smoke)
    assert job_tag(cfg, plumbing[:3] + list(smoke)) == ("", [])
    # the same job_overrides without +matrix= (not a matrix job), or a tuned file of one's own: tagged
    assert tagged_overrides(list(smoke)) == list(smoke)
    assert tagged_overrides(["variant.params.tuned_file=/home/me/mine.yaml"]) != []


@pytest.mark.parametrize("tag", ["..", "/some/dir", "../../x", "a..b", "a/b", ".hidden"])
def test_a_tag_is_a_plain_name(tag, tmp_path):
    cfg = _compose("stage=correctness", "case=smoke1", "variant=eager", "gpu=cpu", f"output_root={tmp_path}",
                   f"tag={tag}")
    with pytest.raises(SystemExit, match="a tag is one plain name"):
        run_job(cfg, [])
    assert not any(tmp_path.rglob("*.json"))


def test_nothing_is_written_outside_the_output_root_without_out(tmp_path):
    cfg = _compose("stage=correctness", "case=smoke1", "variant=eager", "gpu=cpu", f"output_root={tmp_path}",
                   "variant.name=../../escaped")
    with pytest.raises(SystemExit, match="cannot be part of a result path"):
        result_path(cfg, "")
    out = tmp_path / "mine.json"  # out= says where explicitly
    assert result_path(_compose(f"out={out}", "variant.name=../x"), "") == out


def test_out_an_existing_directory_is_refused_before_any_work(tmp_path):
    cfg = _compose("stage=correctness", "case=smoke1", "variant=eager", "gpu=cpu", f"out={tmp_path}")
    with pytest.raises(SystemExit, match="is a directory; out= names the result file"):
        run_job(cfg, [])


def test_a_job_on_a_device_of_another_gpu_type_is_refused_before_any_work(tmp_path, monkeypatch):
    """A gpu=h200 job whose device is an H100 (a node in the wrong partition, a lent machine that came as another
    card) would file H100 times under h200: it stops before the weights are made, naming the fix, and writes no
    result."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a, **k: "NVIDIA H100 80GB HBM3")
    cfg = _compose("stage=timing", "case=case02", "variant=auto", "gpu=h200", f"output_root={tmp_path}")
    with pytest.raises(SystemExit, match=r"gpu=h200 expects a device whose name matches \['H200'\].*'NVIDIA H100 "
                                         r"80GB HBM3'.*Run it on a node of type h200.*gpu=local takes any GPU"):
        run_job(cfg, [])
    assert not any(tmp_path.rglob("*.json"))


@pytest.mark.parametrize("gpu, name, ok", [
    ("h200", "NVIDIA H200", True), ("h200", "NVIDIA H100 80GB HBM3", False),
    ("h100_96", "NVIDIA H100 NVL", True), ("h100_96", "NVIDIA H100 NVL MIG 3g.47gb", False),
    ("h100_mig47", "NVIDIA H100 NVL MIG 3g.47gb", True), ("h100_mig47", "NVIDIA H200", False),
    ("local", "NVIDIA A100-SXM4-80GB", True)])
def test_each_gpu_type_takes_the_device_names_its_config_lists(gpu, name, ok):
    from workflow.stages.common import check_device_name
    names = _compose(f"gpu={gpu}").gpu.get("device_names")
    if ok:
        check_device_name(gpu, names, name)
    else:
        with pytest.raises(SystemExit, match=f"gpu={gpu} expects a device"):
            check_device_name(gpu, names, name)


# ---------------------------------------------------------------- 2. parameters, weights, inputs


def _other_weights(case, **change):
    """Weights of ``case`` with the shape fields of ``change`` (e.g. D=64, L=3)."""
    return make_weights(replace(case, **change))


@pytest.mark.parametrize("family", ["seqres", "hybrid", "dag", "eager", "nn", "auto"])
def test_weights_of_another_case_are_refused_naming_the_tensor(family):
    c = load_case(SMOKE_FOR.get(family, "smoke1"))
    v = get_variant(family)
    with pytest.raises(WeightsError, match=rf"layer 0 ln1_w has shape \({2 * c.D},\); {c.name} \(D={c.D}\) needs "):
        v.prepare(c, _other_weights(c, D=2 * c.D))                      # another case's width
    with pytest.raises(WeightsError, match=f"{c.L + 1} weight layers for {c.name}, which has L={c.L}"):
        v.prepare(c, _other_weights(c, L=c.L + 1))                      # an extra layer is not ignored
    with pytest.raises(WeightsError, match=f"{c.L - 1} weight layers"):
        v.prepare(c, _other_weights(c, L=c.L - 1) if c.L > 1 else replace(make_weights(c), layers=[]))


def test_every_tensor_shape_dtype_and_device_of_the_weights_is_checked():
    c = load_case("smoke1")
    w = make_weights(c)
    w.layers[1].w_2 = w.layers[1].w_2[:, :-1]  # one column short
    with pytest.raises(WeightsError, match=r"layer 1 w_2 has shape \(32, 127\); smoke1 \(D=32\) needs \(32, 128\)"):
        check_weights("seqres", c, w)
    w = make_weights(c)
    w.lnf_b = w.lnf_b.double()
    with pytest.raises(WeightsError, match="lnf_b has dtype torch.float64"):
        check_weights("hybrid", c, w)
    w = make_weights(c)
    w.layers[0].b_o = w.layers[0].b_o.to("meta")
    with pytest.raises(WeightsError, match="layer 0 b_o is on meta, lnf_w on cpu"):
        check_weights("dag", c, w)


@pytest.mark.parametrize("name", list_variants())
def test_an_unknown_parameter_is_refused_the_same_way_by_every_variant(name):
    c = load_case("smoke1")
    with pytest.raises(ParameterError, match=rf"^{name}: unknown parameters \['bogus'\]; valid: "):
        get_variant(name).prepare(c, make_weights(c), bogus=1)


@pytest.mark.parametrize("family, params, message", [
    ("seqres", {"num_warps": 3}, "num_warps=3 must be a power-of-two integer in [1, 16]"),
    ("seqres", {"num_warps": "four"}, "num_warps='four' must be a power-of-two integer"),
    ("seqres", {"block_m": 0}, "block_m=0 must be a power-of-two integer >= 16"),
    ("seqres", {"block_k": 0}, "block_k=0 must be a power-of-two integer >= 16"),
    ("seqres", {"block_n": 48}, "block_n=48 must be a power-of-two integer >= 16 (or 'auto')"),
    ("seqres", {"attn_fill": 1}, "attn_fill=1 not in [True, False]"),
    ("seqres", {"tune": "sometimes"}, "tune='sometimes' not in ['committed', 'search', 'off']"),
    ("hybrid", {"attn_block_m": 0}, "attn_block_m=0 must be a power-of-two integer >= 16"),
    ("hybrid", {"attn_block_m": 7}, "attn_block_m=7 must be a power-of-two integer >= 16"),
    ("hybrid", {"attn_block_n": {"default": 24}}, "attn_block_n.default=24 must be a power-of-two"),
    ("hybrid", {"gemm": {"qkv": "bf16x3", "fc3": "fp32"}}, "gemm={'qkv': 'bf16x3', 'fc3': 'fp32'}"),
    ("hybrid", {"overrides": {"5": {"gemm": "fp32"}}}, "overrides key '5' is not a layer of this case (L=1)"),
    ("hybrid", {"overrides": {"-2": {"gemm": "fp32"}}}, "an index in [-1, 0]"),
    ("dag", {"num_warps": 6}, "num_warps=6: 4 or 8"),
    ("dag", {"block_m": 24}, "block_m=24 must be a power of two"),
    ("eager", {"dynamic": True}, "unknown parameters ['dynamic']"),
    ("compile_default_fp32", {"dynamic": "yes"}, "dynamic='yes' not in [True, False]"),
    ("auto", {"seqres": 4}, "auto: seqres=4 must be a mapping of seqres's parameters"),
    ("auto", {"route": {"seqres": 3}}, "route.seqres=3"),
])
def test_parameters_are_checked_up_front_naming_the_parameter_and_the_allowed_values(family, params, message):
    c = load_case(SMOKE_FOR.get(family, "smoke3" if family == "hybrid" else "smoke1"))
    with pytest.raises(ParameterError) as e:
        get_variant(family).prepare(c, make_weights(c), **params)
    assert message in str(e.value)


def test_hybrid_layer_overrides_name_real_layers_only():
    from kernels.hybrid.model import layer_settings
    base = dict(gemm="bf16x3", attention="triton", qk_prec="bf16x3", pv_prec="bf16x3")
    s = layer_settings(2, base, {"-1": {"gemm": "fp32"}, "0": {"attention": "sdpa_fp32"}})
    assert [x["gemm"]["qkv"] for x in s] == ["bf16x3", "fp32"] and s[0]["attention"] == "sdpa_fp32"
    with pytest.raises(ParameterError, match="'5' is not a layer"):  # no longer layer 5 % 2 = 1
        layer_settings(2, base, {"5": {"gemm": "fp32"}})


@pytest.fixture(scope="module")
def prepared():
    """One prepared object per family (prepare only: no kernel runs) and the peers'."""
    out = {}
    for name in ("seqres", "hybrid", "dag", "eager", "auto"):
        c = load_case(SMOKE_FOR.get(name, "smoke1"))
        out[name] = (c, get_variant(name).prepare(c, make_weights(c)))
    return out


@pytest.mark.parametrize("name", ["seqres", "hybrid", "dag", "eager", "auto"])
def test_run_inputs_are_checked_with_a_message_that_says_what_is_wrong(prepared, name):
    c, p = prepared[name]
    run = get_variant(name).run
    x = make_input(c, 1.0, 0)
    fam = "seqres" if name == "auto" else name
    strided = torch.empty(c.B, c.S, 2 * c.D)[..., ::2]
    strided.copy_(x)
    with pytest.raises(ValueError, match=rf"{fam}: x is not contiguous \(strides .*\); pass x.contiguous\(\)"):
        run(p, strided)
    with pytest.raises(ValueError, match=rf"{fam}: x is on meta, the prepared model on cpu"):
        run(p, x.to("meta"))
    with pytest.raises(TypeError, match=rf"{fam}: x has dtype torch.float64; the model takes torch.float32"):
        run(p, x.double())
    with pytest.raises(ValueError, match=rf"{fam}: x has shape \(\d+, {c.S}, {c.D}\); {c.name} needs \(B, S, D\)"):
        run(p, x[:1] if c.B > 1 else torch.cat([x, x]))


def test_load_case_refuses_what_is_not_a_name_or_a_number():
    for bad in (1.5, True, None, [1]):
        with pytest.raises(TypeError, match="load_case takes a case name or number"):
            load_case(bad)
    assert load_case(7) == load_case("7") == load_case("case07")


@pytest.mark.parametrize("override, key", [
    ("ncu.required=maybe", "ncu.required: Input should be a valid boolean (got 'maybe')"),
    ("gate.seeds=abc", "gate.seeds: Input should be a valid list (got 'abc')"),
    ("gate.margin.enabled=maybe", "gate.margin.enabled: Input should be a valid boolean"),
    ("timing.reps=many", "timing.reps: Input should be a valid integer (got 'many')"),
    ("+allow_cpu_full=maybe", "allow_cpu_full: Input should be a valid boolean"),
    ("+gate.typo=1", "gate.typo: Extra inputs are not permitted"),
])
def test_an_ill_typed_config_value_is_refused_before_any_work_naming_the_key(override, key, tmp_path):
    cfg = _compose("stage=correctness", "case=smoke1", "variant=eager", "gpu=cpu", f"output_root={tmp_path}", override)
    with pytest.raises(SystemExit, match="error: " + key.replace("(", r"\(").replace(")", r"\)")):
        run_job(cfg, [override])
    assert not any(tmp_path.rglob("*.json"))


@pytest.mark.parametrize("override, shown", [("case.B=8", "case.B=8"), ("case.causal=true", "case.causal=True"),
                                             ("+case.extra=1", "case.extra=1")])
def test_an_override_of_a_case_field_is_refused_naming_it(override, shown, tmp_path):
    """Stages load the case by name (SPEC data): a changed field would be ignored, so it is an error."""
    cfg = _compose("stage=correctness", "case=smoke1", "variant=eager", "gpu=cpu", f"output_root={tmp_path}", override)
    with pytest.raises(SystemExit, match=rf"error: case fields cannot be overridden \({shown};"):
        run_job(cfg, [override])
    assert not any(tmp_path.rglob("*.json"))


@pytest.mark.parametrize("variant, override", [
    ("eager", "+variant.params.bogus=1"), ("seqres", "+variant.params.bogus=1"), ("hybrid", "+variant.params.bogus=1"),
    ("dag", "+variant.params.bogus=1"), ("auto", "+variant.params.seqres.bogus=1"),
    ("seqres", "variant.params.num_warps=four"), ("compile_default_fp32", "variant.params.dynamic=maybe"),
])
def test_a_parameter_error_exits_non_zero_and_writes_nothing_on_every_variant(variant, override, tmp_path):
    case = {"hybrid": "smoke3", "dag": "smoke2"}.get(variant, "smoke1")
    args = ["stage=correctness", f"case={case}", f"variant={variant}", "gpu=cpu", f"output_root={tmp_path}", override]
    key = override.split("=")[0].split(".")[-1]
    with pytest.raises(SystemExit, match=rf"^error: \w+: (unknown parameters \['{key}'\]|{key}=)") as e:
        run_job(_compose(*args), args)
    assert e.value.code != 0 and not any(tmp_path.rglob("*.json"))


def test_the_exit_code_of_a_parameter_error_is_1(tmp_path):
    r = _cli("stage=correctness", "case=smoke1", "variant=seqres", "gpu=cpu", f"output_root={tmp_path}",
             "variant.params.num_warps=four")
    assert r.returncode == 1 and "error: seqres: num_warps='four' must be" in r.stderr
    assert not any(tmp_path.rglob("*.json"))


# ---------------------------------------------------------------- 3. the gate


def test_the_gate_fails_on_a_non_finite_reference_and_says_the_reference_is_broken():
    inf = float("inf")
    r = gate(torch.tensor([1.0, 0.0, 12345.0]), torch.tensor([1.0, inf, -inf]))
    assert not r.passed and "the reference is broken" in r.reason
    r = gate(torch.tensor([1.0, float("nan")]), torch.tensor([1.0, float("nan")]))
    assert not r.passed and "reference is broken" in r.reason


def test_the_gate_handles_empty_tensors():
    r = gate(torch.empty(0, 4), torch.empty(0, 4))
    assert r.passed and r.max_abs == 0.0 and r.worst_index is None
    assert not gate(torch.empty(0, 4), torch.empty(0, 5)).passed


# ---------------------------------------------------------------- 4. every record a job writes is valid


def test_a_failing_variant_writes_a_marked_valid_failure_record(tmp_path):
    """A variant that raises inside its own code: status error, passed false, the record valid (exit 0)."""
    cfg = _compose("stage=correctness", "case=smoke1", "variant=auto", "gpu=cpu", f"output_root={tmp_path}",
                   "variant.params.route.seqres=no_such_variant")
    rec = run_job(cfg, [])
    assert rec["status"] == "unsupported" and not rec["passed"]
    validate_record("correctness", json.loads((tmp_path / "correctness/cpu/smoke1/auto.json").read_text()))
