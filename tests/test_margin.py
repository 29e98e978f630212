"""SPEC §4's margin rule in the correctness stage: a precision scheme must stay at or below 0.9 of the tolerance over
hundreds of unseen inputs and other weight seeds. Variants that sit just under the tolerance, or that break it on a
rare input, pass the gate's 14 checks and are caught here."""
import hashlib

import pytest
import torch
from omegaconf import OmegaConf

from kernels import Variant, gate, load_case, make_input, make_weights, reference_forward
from workflow.stages.correctness import check_variant, margin_check, reference_batch

CFG = OmegaConf.load("config/gate/default.yaml")
SCALES, SEEDS, ATOL, RTOL = list(CFG.scales), list(CFG.seeds), float(CFG.atol), float(CFG.rtol)
CPU = torch.device("cpu")


def _digest(x: torch.Tensor) -> int:
    return int(hashlib.sha1(x.numpy().tobytes()).hexdigest()[:8], 16)


def _noisy(over_tol, name="noisy"):
    """A variant that returns the reference with one element moved by ``over_tol(x)`` x its tolerance."""
    def prepare(case, w, **params):
        return case, w

    def run(p, x):
        case, w = p
        y = reference_forward(case, w, x).clone()
        tol = max(ATOL, RTOL * abs(float(y.view(-1)[0])))
        y.view(-1)[0] += over_tol(x) * tol
        return y
    return Variant(name, prepare, run, kind="ours")


def _gate_run(case, v):
    w = make_weights(case)
    return check_variant(case, w, v, v.prepare(case, w), SCALES, SEEDS, ATOL, RTOL, CPU)


SMALL = OmegaConf.merge(CFG.margin, {"inputs": 32, "inputs_per_weight_seed": 8})


def _margin(case, v, mcfg=CFG.margin):
    w = make_weights(case)
    return margin_check(case, w, v, v.prepare(case, w), {}, 0.1, mcfg, SEEDS, ATOL, RTOL, CPU)


def test_the_margin_inputs_and_weights_are_the_configured_counts_and_unseen():
    case = load_case("smoke1")
    m = _margin(case, _noisy(lambda x: 0.5))
    assert m["n_inputs"] == CFG.margin.inputs + len(CFG.margin.weight_seed_offsets) * CFG.margin.inputs_per_weight_seed
    assert m["n_inputs"] >= 256 + 3 * 64
    assert set(m["max_over_tol_per_weight_seed"]) == {str(case.weight_seed + o) for o in
                                                      [0, *CFG.margin.weight_seed_offsets]}
    assert m["passed"] and m["max_over_tol"] == pytest.approx(0.5, rel=1e-3) and m["gate_failures"] == 0
    assert m["worst"]["scale"] == 0.1 and m["worst"]["input_seed"] >= CFG.margin.input_seed


def test_just_below_the_tolerance_passes_the_gate_and_fails_the_margin():
    case = load_case("smoke1")
    v = _noisy(lambda x: 0.95)
    g = _gate_run(case, v)
    assert g["passed"], "the 2-seed gate cannot see a 5% margin"
    m = _margin(case, v, SMALL)
    assert not m["passed"] and m["max_over_tol"] == pytest.approx(0.95, rel=1e-3)
    assert "margin check failed" in m["reason"] and m["gate_failures"] == 0


def test_a_rare_failing_input_is_caught_by_the_margin_and_not_by_the_gate():
    """Over the tolerance on about one input in 40 (a digest of the input decides): a key is picked so that none of
    the gate's 14 inputs is hit, as an adversarial scheme would be tuned on them."""
    case = load_case("smoke1")
    gate_inputs = [_digest(make_input(case, s, seed)) for s in SCALES for seed in SEEDS]
    key = next(k for k in range(40) if all(d % 40 != k for d in gate_inputs))
    v = _noisy(lambda x: 1.05 if _digest(x) % 40 == key else 0.6)
    assert _gate_run(case, v)["passed"]
    m = _margin(case, v)
    assert not m["passed"] and m["gate_failures"] >= 1 and m["max_over_tol"] == pytest.approx(1.05, rel=1e-3)
    w = m["worst"]
    x = make_input(case, w["scale"], w["input_seed"])
    assert _digest(x) % 40 == key, "the recorded worst input reproduces the failure"


def test_other_weight_seeds_run_the_same_configuration_through_rebind():
    case = load_case("smoke2")
    seen = []
    base = _noisy(lambda x: 0.3)
    v = Variant("rebound", base.prepare, base.run, kind="ours",
                rebind=lambda p, w: seen.append(w) or (p[0], w))
    m = margin_check(case, make_weights(case), v, v.prepare(case, make_weights(case)), {}, 1.0, SMALL, SEEDS,
                     ATOL, RTOL, CPU)
    assert len(seen) == len(CFG.margin.weight_seed_offsets) and m["passed"]
    assert torch.equal(seen[0].lnf_w, make_weights(case, seed=case.weight_seed + 1000).lnf_w)


def test_margin_inputs_may_not_be_the_gates_seeds():
    case = load_case("smoke1")
    bad = OmegaConf.merge(CFG.margin, {"input_seed": 0})
    with pytest.raises(ValueError, match="gate's own seeds"):
        margin_check(case, make_weights(case), _noisy(lambda x: 0.1), None, {}, 1.0, bad, SEEDS, ATOL, RTOL, CPU)


def test_stacked_reference_is_the_per_input_reference():
    """The margin check stacks inputs along the batch for one reference call: the same math, per sequence."""
    case = load_case("smoke2")
    w = make_weights(case)
    xs = [make_input(case, 1.0, s) for s in (100, 101, 102)]
    stacked = reference_forward(case, w, torch.cat(xs)).split(case.B)
    for x, r in zip(xs, stacked):
        assert gate(r, reference_forward(case, w, x)).max_over_tol < 1e-3
    assert reference_batch(case, CPU, 32) == 32


def test_the_correctness_job_records_the_margin_and_fails_on_it():
    """``job()`` runs the margin check for our variants where the gate passes, records it, and ``passed`` follows it
    (``gate_passed`` keeps the 7 scales x seeds verdict)."""
    from types import SimpleNamespace

    from workflow.stages import correctness
    case = load_case("smoke1")
    w = make_weights(case)
    cfg = OmegaConf.create({"gate": OmegaConf.to_container(CFG), "variant": {"params": {}}})
    cfg.gate.margin.inputs, cfg.gate.margin.inputs_per_weight_seed = 16, 4
    for over, ok in ((0.5, True), (0.95, False)):
        v = _noisy(lambda x, o=over: o)
        ctx = SimpleNamespace(cfg=cfg, case=case, weights=w, variant=v, prepared=v.prepare(case, w), device=CPU, out_path=None)
        body = correctness.job(ctx)
        assert body["gate_passed"] and body["passed"] is ok and body["margin"]["n_inputs"] == 16 + 3 * 4
    peer = Variant("peerish", v.prepare, v.run, kind="peer")
    ctx = SimpleNamespace(cfg=cfg, case=case, weights=w, variant=peer, prepared=peer.prepare(case, w), device=CPU, out_path=None)
    assert "margin" not in correctness.job(ctx), "peers are not margin-checked by default (gate.margin.kinds)"


def _counting(over_tol, fail_after=None):
    """``_noisy`` that counts its calls and, with ``fail_after``, stops the job (KeyboardInterrupt, as a time
    limit's SIGINT does) on that call."""
    base = _noisy(over_tol)
    calls = []

    def run(p, x):
        if fail_after is not None and len(calls) == fail_after:
            raise KeyboardInterrupt
        calls.append(_digest(x))
        return base.run(p, x)
    return Variant("counting", base.prepare, run, kind="ours"), calls


def test_an_interrupted_margin_check_resumes_where_it_stopped(tmp_path):
    """A job stopped part-way (a call's time limit) keeps its finished inputs beside its result; the re-run of the same
    job runs only the others, records how many it resumed, gives the uninterrupted run's numbers and removes the file.
    Another configuration (here another scale) never resumes from it."""
    from workflow.stages.correctness import margin_progress_path
    case = load_case("smoke1")
    w = make_weights(case)
    n = SMALL.inputs + len(SMALL.weight_seed_offsets) * SMALL.inputs_per_weight_seed
    over = lambda x: 0.3 + (_digest(x) % 97) / 200  # noqa: E731  a different error per input
    path = margin_progress_path(tmp_path / "correctness" / "auto.json")
    assert path.name == ".auto.margin-progress.jsonl" and not path.name.endswith(".json")

    def check(v, p=path, scale=0.1):
        return margin_check(case, w, v, v.prepare(case, w), {}, scale, SMALL, SEEDS, ATOL, RTOL, CPU, progress_path=p)

    full = check(_counting(over)[0], p=None)
    v, calls = _counting(over, fail_after=37)
    with pytest.raises(KeyboardInterrupt):
        check(v)
    assert len(path.read_text().splitlines()) == 1 + 37
    with open(path, "a") as f:
        f.write('{"weight_seed": 1, "input_se')  # a line torn by the kill
    v, calls = _counting(over, fail_after=3)  # stopped again, after 3 more: the torn line must not hide them
    with pytest.raises(KeyboardInterrupt):
        check(v)
    v, calls = _counting(over)
    m = check(v)
    assert len(calls) == n - 40 and m["resumed_inputs"] == 40 and not path.exists()
    for k in ("n_inputs", "max_over_tol", "p99_over_tol", "median_over_tol", "worst", "max_over_tol_per_weight_seed"):
        assert m[k] == full[k], k
    v, calls = _counting(over, fail_after=5)
    with pytest.raises(KeyboardInterrupt):
        check(v)
    v, calls = _counting(over)
    m = check(v, scale=1.0)
    assert len(calls) == n and m["resumed_inputs"] == 0, "a progress file of another scale is started again"


def test_the_correctness_job_keeps_margin_progress_beside_its_result(tmp_path):
    """``job()`` hands the margin check the progress file next to ``ctx.out_path``; ``resume: false`` turns it off."""
    from types import SimpleNamespace

    from workflow.stages import correctness
    case = load_case("smoke1")
    w = make_weights(case)
    cfg = OmegaConf.create({"gate": OmegaConf.to_container(CFG), "variant": {"params": {}}})
    cfg.gate.margin.inputs, cfg.gate.margin.inputs_per_weight_seed = 8, 2
    out = tmp_path / "auto.json"
    for resume, fail_after, expect_file in ((False, 14 + 5, False), (True, 14 + 5, True)):
        cfg.gate.margin.resume = resume
        v, _ = _counting(lambda x: 0.4, fail_after=fail_after)
        ctx = SimpleNamespace(cfg=cfg, case=case, weights=w, variant=v, prepared=v.prepare(case, w), device=CPU,
                              out_path=out)
        with pytest.raises(KeyboardInterrupt):
            correctness.job(ctx)
        assert (tmp_path / ".auto.margin-progress.jsonl").exists() is expect_file
    cfg.gate.margin.resume = True
    v, calls = _counting(lambda x: 0.4)
    ctx = SimpleNamespace(cfg=cfg, case=case, weights=w, variant=v, prepared=v.prepare(case, w), device=CPU,
                          out_path=out)
    body = correctness.job(ctx)
    assert body["passed"] and body["margin"]["resumed_inputs"] == 5 and len(calls) == 8 + 3 * 2 - 5
    assert body["gate_resumed"] and not (tmp_path / ".auto.margin-progress.jsonl").exists()


def test_a_resumed_correctness_job_takes_the_gate_record_instead_of_gating_again(tmp_path):
    """A job stopped in its margin check leaves the gate's verdict beside its result (hidden, keyed like the margin
    progress); its re-run gates nothing again (no gate-seed input runs), checks only the unfinished margin inputs,
    says it resumed the gate, gives the uninterrupted job's verdict and removes both files. Other parameters (another
    key) gate again."""
    from types import SimpleNamespace

    from workflow.schemas import Correctness
    from workflow.stages import correctness
    case = load_case("smoke1")
    w = make_weights(case)
    cfg = OmegaConf.create({"gate": OmegaConf.to_container(CFG), "variant": {"params": {}}})
    cfg.gate.margin.inputs, cfg.gate.margin.inputs_per_weight_seed = 8, 2
    out = tmp_path / "auto.json"
    gate_file = correctness.gate_record_path(out)
    assert gate_file.name == ".auto.gate-progress.json"

    def job(fail_after=None):
        v, calls = _counting(lambda x: 0.4, fail_after=fail_after)
        ctx = SimpleNamespace(cfg=cfg, case=case, weights=w, variant=v, prepared=v.prepare(case, w), device=CPU,
                              out_path=out)
        return correctness.job(ctx), calls

    full, _ = job()
    assert "gate_resumed" not in full and not gate_file.exists()
    with pytest.raises(KeyboardInterrupt):
        job(fail_after=14 + 5)                      # the gate's 14 runs, then 5 margin inputs
    assert gate_file.exists()
    body, calls = job()
    assert body["gate_resumed"] and len(calls) == 8 + 3 * 2 - 5, "no gate input runs again"
    assert body["passed"] and body["results"] == full["results"] and body["margin"]["resumed_inputs"] == 5
    assert body["margin"]["max_over_tol"] == full["margin"]["max_over_tol"]
    assert not gate_file.exists() and not correctness.margin_progress_path(out).exists()
    import json
    published = json.loads(open("docs/results/h200/raw/correctness/h200/case02/auto.json").read())
    Correctness.model_validate({**published, "gate_resumed": True})   # the result file's schema takes the flag
    with pytest.raises(KeyboardInterrupt):
        job(fail_after=14 + 5)
    cfg.variant.params = {"x": 1}                    # another key: the record is not this job's
    body, calls = job()
    assert "gate_resumed" not in body and len(calls) == 14 + 8 + 3 * 2
