"""The dag family (kernels/dag): task graph, scheduler simulator and the persistent kernel in the interpreter."""
import pytest
import torch

from kernels import Case, Unsupported, gate, get_variant, load_case, make_input, make_weights, reference_forward
from kernels.dag import graph as G
from kernels.dag import host, sim
from kernels.validate import ParameterError

from conftest import SCALES, SEEDS

ODD = Case(name="odd", number=0, family="dag", B=2, S=24, D=96, H=3, L=2, causal=False, weight_seed=7, smoke=True)
ODD_CAUSAL = Case(name="odd_causal", number=0, family="dag", B=3, S=40, D=48, H=3, L=1, causal=True, weight_seed=8,
                  smoke=True)
# tilings worth checking besides the defaults: narrow tiles, deep K splits, row blocks that straddle sequences
TILINGS = [{}, dict(block_m=16, block_n_qkv=32, block_n_o=16, block_n_ffn1=64, block_n_ffn2=32, split_k_o=3,
                    split_k_ffn2=5, block_q=16, block_kv=16, block_m_ln=8),
           dict(block_m=32, split_k_o=2, split_k_ffn2=8, order="layer")]


def _graph(case, n_programs=132, **params):
    return host.graph_for(case, n_programs=n_programs, **params)


# --- graph builder ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["case02", "case03", "case04", "case12"])
def test_graph_of_every_dag_case_is_complete_ordered_and_hazard_free(name):
    g = _graph(load_case(name))
    assert G.topological(g) == []
    assert G.check_coverage(g) == []
    assert G.check_hazards(g) == []
    assert all(g.goals[c] > 0 for t in g.tasks for c in t.waits)


@pytest.mark.parametrize("case", [ODD, ODD_CAUSAL, load_case("smoke2")], ids=lambda c: c.name)
@pytest.mark.parametrize("params", TILINGS, ids=["default", "narrow", "layer_order"])
def test_graph_of_odd_shapes_is_complete_ordered_and_hazard_free(case, params):
    g = _graph(case, 7, **params)
    assert G.topological(g) == []
    assert G.check_coverage(g) == []
    assert G.check_hazards(g) == []


def test_hazard_check_finds_a_missing_dependency():
    g = _graph(load_case("smoke2"), 4)
    i = next(i for i, t in enumerate(g.tasks) if t.kind == G.LN2)
    g.tasks[i].waits = ()          # LN2 no longer waits for the output projection
    g.producers = G._producer_lists(g.tasks, g.n_counters)
    assert any("ln2" in p for p in G.check_hazards(g))


def test_coverage_check_finds_a_missing_task():
    g = _graph(load_case("smoke2"), 4)
    g.tasks = [t for t in g.tasks if not (t.kind == G.FFN1 and t.a == 0 and t.b == 0)]
    assert any("ffn1" in p for p in G.check_coverage(g))


def test_attention_waits_only_for_the_key_rows_it_reads():
    g = _graph(load_case("case04"), **dict(block_m=64, block_q=64))
    attn = [t for t in g.tasks if t.kind == G.ATTN and t.layer == 0 and t.b == 0]
    assert sorted(len(t.waits) for t in attn) == list(range(1, 9))  # causal: query block qb waits for qb + 1 blocks


def test_goals_count_the_signals():
    g = _graph(load_case("case03"))
    counts = [0] * g.n_counters
    for t in g.tasks:
        for c in t.signals:
            counts[c] += 1
    assert counts == g.goals and g.goals[0] == 0


def test_tiling_errors_name_the_parameter():
    c = load_case("case02")
    with pytest.raises(G.TilingError, match="block_m_ln"):
        G.build(c, G.Tiling(block_m=16, block_m_ln=32))
    with pytest.raises(G.TilingError, match="block_n_o"):
        G.build(c, G.Tiling(block_n_o=96))
    with pytest.raises(G.TilingError, match="block_k"):
        G.build(ODD, G.Tiling(block_k=64, block_m=16, block_q=16, block_kv=16))


# --- simulator -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("policy", sim.POLICIES)
@pytest.mark.parametrize("n", [1, 2, 3, 8, 33])
def test_random_interleavings_respect_dependencies_and_never_deadlock(policy, n):
    for case, params in ((load_case("smoke2"), {}), (ODD, TILINGS[1]), (ODD_CAUSAL, {})):
        g = _graph(case, n, **params)
        for seed in range(3):
            assert sim.interleave(g, n, policy, seed) > 0


def test_a_queue_out_of_topological_order_deadlocks_in_the_simulator():
    g = _graph(load_case("smoke2"), 2)
    g.tasks = g.tasks[::-1]
    g.producers = G._producer_lists(g.tasks, g.n_counters)
    with pytest.raises(sim.Deadlock):
        sim.interleave(g, 1, "queue", 0)


@pytest.mark.parametrize("policy", sim.TIMED_POLICIES)
def test_timed_makespan_is_bounded_by_work_and_critical_path(policy):
    g = _graph(load_case("case03"))
    r = sim.timed(g, 132, policy, jitter=0.3, seed=1)
    assert r.makespan_us >= max(g.critical_path_us(), r.work_us / 132) - 1e-6
    assert 0.0 <= r.idle_fraction < 1.0


def test_window_of_one_ticket_is_the_queue_and_wider_windows_finish():
    """The simulator's ``window`` policy: with one ticket per program it is the queue policy exactly; with two and
    three it runs every task after its producers (``timed`` asserts it) and never stalls."""
    g = _graph(load_case("case03"))
    for seed, jitter in ((0, 0.0), (1, 0.3)):
        q = sim.timed(g, 132, "queue", jitter=jitter, seed=seed)
        assert sim.timed(g, 132, "window", jitter=jitter, seed=seed, window=1).makespan_us == pytest.approx(q.makespan_us)
    for w in (2, 3):
        r = sim.timed(g, 33, "window", jitter=0.3, seed=2, window=w)
        assert r.makespan_us >= max(g.critical_path_us(), r.work_us / 33) - 1e-6


def test_ready_policy_never_holds_a_task_that_is_not_ready():
    """The simulator's ``ready`` policy on one program and on many, with and without jitter: every task runs after its
    producers (``timed`` asserts it); with one program and no costs the programs are never idle (a ready task is
    always there: the graph is acyclic), unlike a queue order that is not a list schedule."""
    g = _graph(load_case("smoke2"))
    one = sim.timed(g, 1, "ready", pop_us=0.0, signal_us=0.0)
    assert one.makespan_us == pytest.approx(one.work_us)
    for n, jitter in ((3, 0.0), (33, 0.3)):
        r = sim.timed(g, n, "ready", jitter=jitter, seed=4)
        assert r.makespan_us >= max(g.critical_path_us(), r.work_us / n) - 1e-6


def test_critical_order_is_topological_and_not_slower_than_layer_order():
    c = load_case("case02")
    crit, layer = _graph(c, order="critical"), _graph(c, order="layer")
    assert G.topological(crit) == []
    assert sim.timed(crit, 132).makespan_us <= sim.timed(layer, 132).makespan_us


# --- kernel (Triton interpreter) ---------------------------------------------------------------------------------

def _check(case, params=None, scales=SCALES, seeds=SEEDS):
    w = make_weights(case)
    v = get_variant("dag")
    p = v.prepare(case, w, **(params or {}))
    for scale in scales:
        for seed in seeds:
            x = make_input(case, scale, seed)
            res = gate(v.run(p, x), reference_forward(case, w, x))
            assert res.passed, (case.name, scale, seed, res)
    return p


def test_smoke2_passes_gate_all_scales_two_seeds():
    _check(load_case("smoke2"))


@pytest.mark.slow
def test_odd_shape_passes_gate_all_scales():
    _check(ODD, seeds=[0])


@pytest.mark.parametrize("params", [dict(queue="static"), TILINGS[1], dict(scheme_o="f16_w1", scheme_ffn2="f16_w1"),
                                    dict(wait="serial", queue="static"), dict(cost_model="nominal"),
                                    dict(block_q=32, block_n_qkv=32, block_n_ffn1=32)],
                         ids=["static", "narrow", "f16_w1", "serial_wait", "nominal_order", "short_chain_tiles"])
def test_other_schedules_pass_gate(params):
    _check(ODD_CAUSAL, params, scales=[1e-2], seeds=[0])


def test_two_runs_in_a_row_and_epoch_wraparound():
    c = load_case("smoke2")
    w = make_weights(c)
    p = host.prepare(c, w)
    x = make_input(c, 1.0, 0)
    ref = reference_forward(c, w, x)
    y1, y2 = host.run(p, x), host.run(p, x)
    assert p.epoch == 2 and gate(y1, ref).passed and gate(y2, ref).passed
    assert int(p.ctr[1]) == 2 * p.graph.goals[1]          # counters only grow: epoch x goal
    assert int(p.head[0]) == 2 * (len(p.graph.tasks) + p.grid)  # a ticket per task and one per program per launch
    p.epoch = host._epoch_limit(p)                          # the next launch would overflow int32: zeroed first
    p.ctr.fill_(123)
    assert gate(host.run(p, x), ref).passed and p.epoch == 1
    assert torch.equal(p.ctr, torch.tensor(p.graph.goals, dtype=torch.int32))


def test_run_refuses_cuda_graph_capture(monkeypatch):
    """A captured launch would replay one epoch (every wait passes at once): ``run`` raises while the stream is
    capturing, naming what to do instead, and launches nothing (the queue head and the epoch do not move)."""
    c = load_case("smoke2")
    p = host.prepare(c, make_weights(c))
    assert not host.capturing(p)                     # CPU tensors: never capturing
    monkeypatch.setattr(host, "capturing", lambda p: True)
    with pytest.raises(RuntimeError, match="CUDA graph.*hybrid"):
        host.run(p, make_input(c, 1.0, 0))
    assert p.epoch == 0 and int(p.head[0]) == 0


def test_direct_launch_passes_the_launch_arguments_as_addresses():
    """The direct launch (CUDA: the compiled binary) passes ``_launch_args`` with every tensor as its address, x, y
    and the epoch filled in per launch, then the constexprs: bound here by name against the JIT path's list."""
    c = load_case("smoke2")
    p = host.prepare(c, make_weights(c))
    x = make_input(c, 1.0, 0)
    y = torch.empty_like(x)
    p.direct = host.static_args(p) + ["constexprs"]
    calls = []
    p.runner = lambda *a: calls.append(a)
    host.launch(p, x, y)
    host.launch(p, x, y)
    want = [a.data_ptr() if isinstance(a, torch.Tensor) else a for a in host._launch_args(p, x, y)]
    assert list(calls[1]) == want + ["constexprs"] and p.epoch == 2
    assert all(isinstance(a, (int, float)) for a in calls[1][:-1])
    assert calls[0][host._EPOCH] == 1 and calls[1][host._EPOCH] == 2
    assert calls[1][host._X] == x.data_ptr() and calls[1][host._Y] == y.data_ptr()


class _Event:
    """A stand-in for the CUDA event after the lazy check's copy of err: ``done`` says whether it has landed."""
    done = False

    def query(self):
        return self.done

    def record(self):
        pass


def test_lazy_check_reports_a_gave_up_wait_once_after_the_launch():
    """``check: lazy`` (CUDA's default), driven on the CPU with a stand-in event: the launch goes first, then the
    bookkeeping; a copy of err is read only once it has landed, a new one issued only when none is pending; err[0]
    only grows, so each gave-up wait is reported once, by the first ``run`` that reads its copy."""
    c = load_case("smoke2")
    p = host.prepare(c, make_weights(c), check="lazy")
    p.err_host, p.err_event = torch.zeros(2, dtype=torch.int32), _Event()
    x = make_input(c, 1.0, 0)
    p.err.copy_(torch.tensor([1, 7]))             # a wait of task 7 gave up in the launch before this one
    host.run(p, x)                                # launches, then copies err (nothing read yet)
    assert p.epoch == 1 and p.err_pending and p.err_host.tolist() == [1, 7]
    host.run(p, x)                                # the copy has not landed: no read, no second copy
    assert p.epoch == 2 and p.err_pending
    p.err_event.done = True
    with pytest.raises(RuntimeError, match=r"1 dependency wait\(s\) gave up .*task 7"):
        host.run(p, x)                            # launched first, then the landed copy is read
    assert p.epoch == 3 and not p.err_pending and p.err_seen == 1
    host.run(p, x)                                # a fresh copy is issued; the same count is not reported again
    host.run(p, x)
    assert p.epoch == 5 and p.err_seen == 1 and int(p.err[0]) == 1


@pytest.mark.parametrize("wait", ["serial", "parallel"])
def test_spin_limit_turns_an_unsatisfiable_wait_into_an_error(wait):
    """A goal one signal above what a launch gives: the wait gives up after spin_limit polls and run() raises;
    serial waits read the goal table, parallel waits the goals in the task rows."""
    c = load_case("smoke2")
    p = host.prepare(c, make_weights(c), spin_limit=20, wait=wait)
    c_ln2 = next(t.waits[0] for t in p.graph.tasks if t.kind == G.LN2)
    mw = max(1, p.graph.max_waits)
    goal_cols = p.tab[:, -mw:] if wait == "parallel" else p.tab[:, :0]   # the rows' wait goals (host.task_table)
    waits_there = (p.tab[:, 8:8 + mw] == c_ln2) if wait == "parallel" else goal_cols.bool()
    if wait == "parallel":
        assert int(waits_there.sum()) > 0 and bool((goal_cols[waits_there] == p.goal[c_ln2]).all())
    p.goal[c_ln2] += 1                                       # one signal more than any launch gives
    goal_cols[waits_there] += 1
    with pytest.raises(RuntimeError, match="spin_limit=20"):
        host.run(p, make_input(c, 1.0, 0))
    p.goal[c_ln2] -= 1                                       # counters stay consistent: the next launch is fine
    goal_cols[waits_there] -= 1
    p.ctr.zero_()
    p.head.zero_()
    p.epoch = 0
    x = make_input(c, 1.0, 1)
    assert gate(host.run(p, x), reference_forward(c, make_weights(c), x)).passed


def test_output_is_fresh_and_input_untouched():
    c = load_case("smoke2")
    p = host.prepare(c, make_weights(c))
    x0, x1 = make_input(c, 1.0, 0), make_input(c, 1.0, 1)
    keep = x0.clone()
    y0 = host.run(p, x0)
    y1 = host.run(p, x1)
    assert torch.equal(x0, keep) and y0.data_ptr() != y1.data_ptr() and not torch.equal(y0, y1)


def test_bad_inputs_name_the_fix():
    c = load_case("smoke2")
    p = host.prepare(c, make_weights(c))
    x = make_input(c, 1.0, 0)
    with pytest.raises(ValueError, match=r"\(B, S, D\)"):
        host.run(p, x[:, :16])
    with pytest.raises(TypeError, match="float32"):
        host.run(p, x.double())
    with pytest.raises(ValueError, match="contiguous"):
        host.run(p, x.transpose(1, 2).contiguous().transpose(1, 2))
    with pytest.raises(TypeError, match="torch.Tensor"):
        host.run(p, x.numpy())


def test_bad_parameters_name_the_parameter_and_allowed_values():
    c = load_case("smoke2")
    w = make_weights(c)
    with pytest.raises(ValueError, match="unknown parameters.*block_x"):
        host.prepare(c, w, block_x=3)
    with pytest.raises(ValueError, match="queue='fifo'.*static"):
        host.prepare(c, w, queue="fifo")
    with pytest.raises(ValueError, match="split_k_o"):
        host.prepare(c, w, split_k_o=0)
    with pytest.raises(ValueError, match="num_warps"):
        host.prepare(c, w, num_warps="4")
    with pytest.raises(ValueError, match="grid=2 exceeds.*ctas_per_sm=1"):
        host.prepare(c, w, grid=2, ctas_per_sm=1)
    with pytest.raises(ValueError, match="block_m_ln"):
        host.prepare(c, w, block_m_ln=24)


def test_form_and_ws_stages_are_validated_naming_the_allowed_values():
    c = load_case("smoke2")
    w = make_weights(c)
    assert host.DEFAULTS["form"] == "tl" and host.DEFAULTS["ws_stages"] == 4   # config/variant/dag.yaml
    with pytest.raises(ValueError, match=r"form='wx'.*'tl', 'ws'"):
        host.prepare(c, w, form="wx")
    with pytest.raises(ValueError, match="ws_stages=7: 2 to 6"):
        host.prepare(c, w, ws_stages=7)
    with pytest.raises(ValueError, match="ws_stages"):
        host.check_params(dict(ws_stages="4"))
    for bad in (0, 5):
        with pytest.raises(ValueError, match=fr"ws_pre={bad}: 1 to ws_stages \(4\).*set ws_pre: 4 or less"):
            host.check_params(dict(ws_pre=bad))
    assert host.check_params(dict(ws_pre=4))["ws_pre"] == 4
    with pytest.raises(ValueError, match=r"ws_pre=3: 1 to ws_stages \(2\).*set ws_pre: 2 or less"):
        host.check_params(dict(ws_pre=3, ws_stages=2))


@pytest.mark.parametrize("param, value", [("block_n_o", 128), ("block_n_ffn2", 32), ("block_m", 32),
                                          ("block_k", 128), ("block_q", 32), ("block_kv", 32), ("queue", "static")])
def test_form_ws_refuses_a_parameter_it_does_not_run_naming_it_and_the_fix(param, value):
    """Checked from the parameters alone, before the device: the CPU names the configuration error too."""
    c = load_case("smoke2")
    with pytest.raises(ParameterError, match=f"form ws needs {param}:? .*got {value!r}.*set form: tl or {param}: "):
        host.prepare(c, make_weights(c), form="ws", **{param: value})


def test_form_ws_on_the_cpu_is_unsupported_saying_why():
    """Gluon has no interpreter: on the CPU (and under TRITON_INTERPRET=1) form ws is Unsupported, naming the form
    that runs there; so are GPUs other than sm_90."""
    c = load_case("smoke2")
    with pytest.raises(Unsupported, match="form ws is the warp-specialized Gluon kernel.*sm_90.*Gluon has no "
                                          "interpreter.*use form: tl"):
        host.prepare(c, make_weights(c), form="ws")


def test_form_ws_refuses_a_gpu_that_is_not_sm90(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda d=None: (8, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d=None: "NVIDIA A100-SXM4-80GB")
    with pytest.raises(Unsupported, match="needs an sm_90.*A100-SXM4-80GB is sm_80.*use form: tl"):
        host._check_ws_device(torch.device("cuda"), True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda d=None: (9, 0))
    host._check_ws_device(torch.device("cuda"), True)


def test_launch_runs_form_ws_with_the_prepared_bookkeeping():
    """``launch`` dispatches on the form: form ws's runner (a stand-in: the kernel needs an sm_90 GPU) is handed
    x, y, the prepared epoch and spin limit; the epoch wrap, the error check of ``run`` and its counters are the
    prepared object's, as for form tl (whose kernel does not run: the queue head stays)."""
    from types import SimpleNamespace
    c = load_case("smoke2")
    p = host.prepare(c, make_weights(c), spin_limit=77)
    calls = []
    p.ws = SimpleNamespace(run=lambda x, y, epoch, spin: calls.append((x, y, epoch, spin)))
    x = make_input(c, 1.0, 0)
    y = host.run(p, x)
    host.run(p, x)
    assert [k[2] for k in calls] == [1, 2] and calls[0][3] == 77 and calls[0][0] is x and calls[0][1] is y
    assert int(p.head[0]) == 0 and p.epoch == 2
    p.err.copy_(torch.tensor([1, 3]))            # a wait of task 3 gave up (the runner writes p.err)
    with pytest.raises(RuntimeError, match=r"1 dependency wait\(s\) gave up .*task 3"):
        host.run(p, x)
    p.epoch = host._epoch_limit(p)
    p.ctr.fill_(5)
    host.run(p, x)
    assert calls[-1][2] == 1 and int(p.ctr.abs().sum()) == 0


def test_tune_search_skips_a_form_ws_candidate_it_cannot_prepare(monkeypatch):
    """``config/search/dag.yaml`` offers form ws; where it cannot run (here the CPU: Unsupported) the search leaves
    it out with the reason and times the rest (timing stubbed: it needs CUDA events)."""
    import kernels.timing
    from kernels import tuning
    space = tuning.search_space("dag")
    assert {"form": "ws"} in space
    for over in space:
        host.check_params(over)
    monkeypatch.setattr(kernels.timing, "time_calls", lambda fns, xs, rounds, warmup=1: {k: [1.0] for k in fns})
    c = load_case("smoke2")
    w = make_weights(c)
    p, info, sets = tuning.search(lambda **f: host.prepare_one(c, w, **f), lambda p, x: None, {},
                                  [{"form": "ws"}, {"block_m_ln": 8}], 0.03,
                                  set(host.DEFAULTS) - set(tuning.TUNING_KEYS), make_input(c, 1.0, 0),
                                  skip=(Unsupported, ValueError))
    assert info["candidates"] == [{}, {"block_m_ln": 8}] and p.params["form"] == "tl"
    assert info["skipped"][0]["params"] == {"form": "ws"} and "sm_90" in info["skipped"][0]["reason"]


def test_cases_outside_the_envelope_are_unsupported():
    big = load_case("case14")
    with pytest.raises(Unsupported, match="block_m"):
        host.graph_for(big)
    with pytest.raises(Unsupported, match="multiple of 16"):
        host.graph_for(Case(name="d40", number=0, family="dag", B=1, S=16, D=40, H=2, L=1, causal=False,
                            weight_seed=1))


def test_task_table_matches_the_graph():
    g = _graph(ODD_CAUSAL, 3)
    tab, width = host.task_table(g, goals=True)
    assert tab.shape == (len(g.tasks), width)
    assert host.task_table(g)[1] == width - max(1, g.max_waits)   # the goals only for wait: parallel
    for i in (0, len(g.tasks) // 2, len(g.tasks) - 1):
        t = g.tasks[i]
        row = tab[i].tolist()
        assert row[:7] == [t.kind, t.layer, t.a, t.b, t.c, len(t.waits), len(t.signals)]
        assert tuple(row[8:8 + len(t.waits)]) == t.waits
        mw, ms = max(1, g.max_waits), max(1, g.max_signals)
        assert tuple(row[8 + mw:8 + mw + len(t.signals)]) == t.signals
        assert row[8 + mw + ms:] == [g.goals[c] for c in row[8:8 + mw]]   # parallel waits' goals


def test_static_lists_cover_every_task_once():
    g = _graph(load_case("case04"))
    order = host.static_order(g, 132).tolist()
    assert order[:1] == [0] and order[132] == len(g.tasks)
    assert sorted(order[133:]) == list(range(len(g.tasks)))


def test_dag_is_registered_for_its_family():
    assert get_variant("dag").families == ("dag",)



@pytest.mark.slow
def test_mixed_schemes_and_widths_compile_for_sm90():
    """Three GEMM sites (a scheme and a tile width apart), with the defaults' parallel waits and in-flight wgmma chains,
    compile for sm_90 without a GPU (the interpreter, which the other tests use, does not check constexpr rules: a
    site's constexprs once broke only the real compile)."""
    import os
    import subprocess
    import sys
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, "-m", "bench.dag.aot_check", "smoke2", "--param", "scheme_ffn2=f16_w1",
                          "--param", "block_n_o=32", "--param", "scheme_ffn1=bf16x3", "--param", "wait=parallel",
                          "--param", "wgmma_chain=async_inflight"],
                         capture_output=True, text=True, env=env, timeout=600,
                         cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert out.returncode == 0, out.stderr[-2000:]
    assert "gemm_sites=3" in out.stdout and "spills=0/0" in out.stdout


def test_trace_needs_the_gpu_and_task_profile_needs_a_traced_launch():
    """``trace: true`` reads %globaltimer (GPU only): refused in the interpreter with the reason; ``task_profile`` of
    an untraced launch says what to set."""
    c = load_case("smoke2")
    w = make_weights(c)
    with pytest.raises(ValueError, match="trace=true.*GPU"):
        host.prepare(c, w, trace=True)
    with pytest.raises(ValueError, match="trace=true"):
        host.task_profile(host.prepare(c, w))


def test_realized_chain_follows_the_last_producer_back_to_the_first_task():
    """``task_profile``'s chain on a synthetic trace: every ticket at 0, each task starting 1 µs after its last
    producer ends and taking its cost: the chain is the graph's critical path with a 1 µs link per edge."""
    import torch
    c = load_case("smoke2")
    g = G.build(c, host.tiling_for(c, host.check_params({}), 8), n_programs=8)
    n = len(g.tasks)
    start, done = [0.0] * n, [0.0] * n
    for i, t in enumerate(g.tasks):  # queue order is topological
        start[i] = max((done[p] + 1.0 for p in g.producers[i]), default=0.0)
        done[i] = start[i] + t.cost
    tr = torch.zeros(n, 4, dtype=torch.float64)
    tr[:, 1], tr[:, 2] = torch.tensor(start) * 1e3, torch.tensor(done) * 1e3
    ch = host._realized_chain(g, tr)
    assert ch["link_mean"] == pytest.approx(1.0)
    assert ch["work_total"] + ch["link_total"] == pytest.approx(max(done))
    assert ch["head"].startswith("ln1[l0]") and ch["head_at_us"] == 0.0
    assert ch["path"][0][0] == ch["head"] and len(ch["path"]) == ch["tasks"]
    assert sum(w for _, w in ch["path"]) == pytest.approx(ch["work_total"], abs=1e-2)


def test_task_profile_reads_the_five_stamps():
    """``task_profile`` on a synthetic trace (the kernel's layout: ticket, wait done, task done, program << 16 | SM,
    work done before the signal): per kind the wait, the work (to signalled) and the signal alone."""
    import types

    import torch
    c = load_case("smoke2")
    g = G.build(c, host.tiling_for(c, host.check_params({}), 8), n_programs=8)
    n = len(g.tasks)
    tr = torch.zeros(n, 5, dtype=torch.int64)
    for i in range(n):  # task i: ticket at 10 i µs, 2 µs of wait, 5 µs of work whose last 0.5 µs is the signal
        tr[i] = torch.tensor([10_000 * i, 10_000 * i + 2_000, 10_000 * i + 7_000, (i % 8) << 16 | (i % 4),
                              10_000 * i + 6_500])
    p = types.SimpleNamespace(meta={"TRACE": True}, trace=tr, graph=g, grid=8)
    prof = host.task_profile(p)
    for d in prof["kinds"].values():
        assert d["wait_mean"] == pytest.approx(2.0) and d["work_mean"] == pytest.approx(5.0)
        assert d["signal_mean"] == pytest.approx(0.5)
    assert prof["kernel_us"] == pytest.approx(10 * (n - 1) + 7) and prof["sms"] == 4


def test_simulate_table_prices_levers_and_restores_the_cost_model(capsys):
    """``bench.dag.simulate``: a lower fixed cost per task gives a shorter critical path; the window column is
    printed; the committed cost models are left as they are."""
    from bench.dag import simulate
    before = dict(G.COST_MODELS)
    args = ["smoke2", "--seeds", "2", "--programs", "8", "--param", "cost_model=h200"]
    simulate.main(args + ["--window", "2", "--durations", "h200"])
    base = capsys.readouterr().out.splitlines()
    simulate.main(args + ["--cost-task-us", "1.0"])
    cheap = capsys.readouterr().out.splitlines()
    assert G.COST_MODELS == before
    assert "window" in base[0] and len(base[1].split()) == 12
    assert float(cheap[1].split()[3]) < float(base[1].split()[3])   # the critical path


def test_simulate_ws_tuned_builds_each_case_with_its_committed_parameters(capsys):
    """``bench.dag.simulate --ws --tuned h200``: form ws's costs and one program an SM, each case's graph from its
    committed parameters (case 4's: 64-wide tiles, its task count differs from the defaults'), a --param over them;
    a GPU without committed parameters is refused naming the file."""
    from bench.dag import levers, simulate
    from bench.dag.ws_ab import committed_params
    from kernels import load_case
    case = load_case(4)
    simulate.main(["4", "--ws", "--tuned", "h200", "--seeds", "2"])
    out = capsys.readouterr().out.splitlines()
    assert "132 programs, cost model ws" in out[0]
    want = host.graph_for(case, n_programs=132, cost=levers.WS["cost"], **committed_params(case, "h200"))
    assert int(out[1].split()[1]) == len(want.tasks)
    simulate.main(["4", "--ws", "--tuned", "h200", "--seeds", "2", "--param", "split_k_o=1"])
    fewer = capsys.readouterr().out.splitlines()
    assert int(fewer[1].split()[1]) < len(want.tasks)
    simulate.main(["4", "--seeds", "2"])
    assert "132 programs, cost model h200" in capsys.readouterr().out      # without --ws: form tl's, as before
    with pytest.raises(SystemExit, match="config/tuned/nogpu/case04.yaml"):
        simulate.main(["4", "--ws", "--tuned", "nogpu"])


def test_cluster_price_partitions_by_row_block_and_matches_the_queue_in_one_cluster(capsys):
    """``bench.dag.cluster_price``: every task of a row block lands in that row block's clusters (with more clusters
    than row blocks, spread by column tile, head or LayerNorm chunk); one cluster of every program with today's link
    is today's queue exactly (``kernels.dag.sim.timed``); an order fitted to the partition is topological; the
    published speedups are read from the dag report; the CLI prices a case and refuses more programs than SMs."""
    from bench.dag import cluster_price as CP
    from bench.dag.levers import WS
    from bench.dag.ws_ab import committed_params
    from kernels import load_case
    from kernels.dag.sim import timed
    case = load_case(4)
    g = host.graph_for(case, n_programs=132, cost=WS["cost"], **committed_params(case, "h200"))
    nm = case.tokens // g.tiling.block_m
    for n in (nm, 2 * nm):
        cl = CP.clusters_of(g, n)
        assert set(cl) == set(range(n))
        per = n // nm
        for t, c in zip(g.tasks, cl):
            assert c // per == CP.row_block(t, case, g.tiling)
    dur = CP.durations(g, None, None, None, 0.0, 0)
    assert dur == [t.cost for t in g.tasks]
    one, share = CP.partitioned(g, [0] * len(g.tasks), 1, 132, dur, WS["pop_us"], WS["signal_us"], 0.0)
    assert share == 1.0
    assert one == pytest.approx(timed(g, 132, "queue", 0.0, WS["pop_us"], WS["signal_us"]).makespan_us)
    # an order fitted to the partition: every task once, producers first; in one cluster at today's link, no slower
    # than today's queue order on the cost model's durations
    order = CP.partition_order(g, cl, n, 132 // n, 0.3, WS["signal_us"])
    assert sorted(order) == list(range(len(g.tasks)))
    pos = {i: k for k, i in enumerate(order)}
    assert all(pos[q] < pos[i] for i in range(len(g.tasks)) for q in g.producers[i])
    mine = CP.partition_order(g, [0] * len(g.tasks), 1, 132, WS["signal_us"], WS["signal_us"])
    fitted, _ = CP.partitioned(g, [0] * len(g.tasks), 1, 132, dur, WS["pop_us"], WS["signal_us"], 0.0, mine)
    assert fitted <= one * 1.02
    pub = CP.published()                  # the published dag report's speedups, as the pipeline wrote them
    assert set(pub) == {2, 3, 4, 12} and all(x > 0 for x in pub.values()), pub
    CP.main(["4", "--seeds", "1", "--link-intra", "0.3", "--order", "partition"])
    out = capsys.readouterr().out.splitlines()
    assert out[1].split()[0] == "case04" and len(out[1].split()) == 10 and "partition order" in out[0]
    with pytest.raises(SystemExit, match="more than the 132 SMs"):
        CP.main(["4", "--seeds", "1", "--size", "16", "--clusters", "9"])


def test_check_gpu_configs_are_valid_parameters():
    """Every ``bench/dag/check_gpu`` configuration names parameters ``prepare`` knows, with allowed values (a typo
    would cost a GPU call; the tune candidates: tests/test_tuning.py)."""
    from bench.dag.check_gpu import CONFIGS, PRECISION_CONFIGS
    for params in CONFIGS.values():
        host.check_params(params)
    assert set(PRECISION_CONFIGS) <= set(CONFIGS)


def test_levers_rewrite_the_graph_consistently():
    """``bench.dag.levers``: a K-split lever doubles the QKV tiles, each counter's goal is the number of tasks that
    signal it, the queue order stays topological, and the builder is left as it was; the attention lever only
    shortens long causal attention tasks."""
    from bench.dag import levers
    case = load_case("case04")
    base = host.graph_for(case, n_programs=264, cost_model="h200")
    g = levers.build(case, "qkv_split2", 0.3, 4)
    assert g.counts()["qkv"] == 2 * base.counts()["qkv"] and g.counts()["ffn1"] == base.counts()["ffn1"]
    signalled = [0] * g.n_counters
    for t in g.tasks:
        for c in t.signals:
            signalled[c] += 1
    assert signalled == list(g.goals)
    assert G.topological(g) == []
    assert host.graph_for(case, n_programs=264, cost_model="h200").counts() == base.counts()  # builder restored
    f = levers.build(case, "ln_fold", 1.0, 4, consumer_us=0.5)
    counts = f.counts()
    assert counts["ln2"] == 0 and counts["ln1"] == base.counts()["ln1"] // case.L
    assert counts["lnf"] == base.counts()["lnf"]
    assert {k: v for k, v in counts.items() if not k.startswith("ln")} == \
        {k: v for k, v in base.counts().items() if not k.startswith("ln")}
    assert G.topological(f) == [] and f.work_us() > base.work_us() - sum(t.cost for t in base.tasks if t.kind in
                                                                         (G.LN1, G.LN2))
    qkv1 = next(t for t in f.tasks if t.kind == G.QKV and t.layer == 1)
    assert [f.counter_names[c][:2] for c in qkv1.waits] == [("f2", 0)]   # layer 0's FFN2 tiles of its rows
    for lever, gone in (("ffn_fused", "ffn2"), ("attn_oproj", "oproj")):
        f = levers.build(case, lever, 0.5, 4)
        assert f.counts()[gone] == 0 and G.topological(f) == []
        assert f.work_us() > base.work_us() - sum(t.cost for t in base.tasks if G.KINDS[t.kind] == gone)
        signalled = [0] * f.n_counters
        for t in f.tasks:
            for c in t.signals:
                signalled[c] += 1
        assert signalled == list(f.goals) and all(f.goals[c] > 0 for t in f.tasks for c in t.waits)
    a = levers.build(case, "attn_kv_split", 2.0, 4)
    before = {t.seq: t.cost for t in base.tasks if t.kind == G.ATTN}
    after = {t.seq: t.cost for t in a.tasks if t.kind == G.ATTN}
    assert all(after[k] < before[k] for k, t in ((t.seq, t) for t in a.tasks if t.kind == G.ATTN) if t.c >= 4)
    assert all(after[k] == before[k] for k, t in ((t.seq, t) for t in a.tasks if t.kind == G.ATTN) if t.c < 4)


def test_levers_i8_recost_only_their_gemms():
    """The int8 limb levers ("Results" 52) change costs, not the graph: the re-costed GEMM tiles are what
    ``G.gemm_cost`` gives their shape at 2-byte operands (plus the extra µs), every other task keeps its cost, and
    ``i8_all`` re-costs the output projection and FFN2 as well."""
    from bench.dag import levers
    case = load_case("case04")
    base = host.graph_for(case, n_programs=264, cost_model="h200")
    for lever, kinds in (("i8_qkv_ffn1", (G.QKV, G.FFN1)), ("i8_all", (G.QKV, G.FFN1, G.OPROJ, G.FFN2)),
                         ("i8b_all", (G.QKV, G.FFN1, G.OPROJ, G.FFN2))):
        g = levers.build(case, lever, 0.25, 4)
        assert [(t.kind, t.waits, t.signals) for t in g.tasks] == [(t.kind, t.waits, t.signals) for t in base.tasks]
        units, block = levers.I8[lever][1:]
        for t, b in zip(g.tasks, base.tasks):
            if t.kind in kinds:
                src, dst = t.access[0], t.access[1]
                k = src.c1 - src.c0
                want = 0.25 * (1 if block is None else k // 64) + G.gemm_cost(
                    src.r1 - src.r0, dst.c1 - dst.c0, k, units, a_bytes=2, w_bytes=2, cost=base.tiling.cost)
                assert t.cost == pytest.approx(want) and t.cost != pytest.approx(b.cost)
            else:
                assert t.cost == b.cost
    qkv = next(t for t in base.tasks if t.kind == G.QKV)
    assert qkv.access[0].c1 - qkv.access[0].c0 == case.D                       # K of a QKV tile, from what it reads


def test_levers_ln_fold_in_place_closes_the_residual_hazard():
    """``ln_fold_ws``: no LN1 (layer 0 included) or LN2 task, the final LayerNorm kept; layer 0's QKV tiles wait for
    nothing, later QKV tiles for the FFN2 tiles of their rows, FFN1 tiles for the output projection's; every output
    projection / FFN2 task also waits for a counter of its row block that all its QKV / FFN1 tiles signal (they read
    the rows it adds into), goals recounted, the order topological, and each folded tile costs the consumer µs more."""
    import dataclasses
    from bench.dag import levers
    case = dataclasses.replace(load_case("case03"), B=1, L=2)   # case 3's layers, two of them over two row blocks
    base = host.graph_for(case, n_programs=264, cost_model="h200")
    f = levers.build(case, "ln_fold_ws", 0.0, 4, consumer_us=0.7)
    counts = f.counts()
    assert counts["ln1"] == counts["ln2"] == 0 and counts["lnf"] == base.counts()["lnf"]
    assert G.topological(f) == []
    signalled = [0] * f.n_counters
    for t in f.tasks:
        for c in t.signals:
            signalled[c] += 1
    assert signalled == list(f.goals) and all(f.goals[c] > 0 for t in f.tasks for c in t.waits)
    tiles = {}
    for t in f.tasks:
        if t.kind in (G.QKV, G.FFN1):
            tiles[(t.kind, t.layer, t.a)] = tiles.get((t.kind, t.layer, t.a), 0) + 1
    for t in f.tasks:
        names = [f.counter_names[c] for c in t.waits]
        if t.kind == G.QKV:
            assert [n[:2] for n in names] == ([] if t.layer == 0 else [("f2", t.layer - 1)]), (t.name, names)
        if t.kind == G.FFN1:
            assert [n[:2] for n in names] == [("o", t.layer)], (t.name, names)
        if t.kind in (G.OPROJ, G.FFN2):
            key = ("qkv_rows" if t.kind == G.OPROJ else "f1_rows", t.layer, t.a)
            c = [c for c in t.waits if f.counter_names[c] == key]
            assert len(c) == 1 and f.goals[c[0]] == tiles[(G.QKV if t.kind == G.OPROJ else G.FFN1, t.layer, t.a)]
    cost = {(t.kind, t.layer, t.a, t.b, t.c): t.cost for t in base.tasks}
    for t in f.tasks:
        if t.kind in (G.QKV, G.FFN1):
            assert t.cost == pytest.approx(cost[(t.kind, t.layer, t.a, t.b, t.c)] + 0.7)
    # the accesses say the same: no hazard with the row-block waits; without them the residual is read by QKV /
    # FFN1 tiles (and started as x by layer 0's first QKV tile of each row block) while it is added into
    assert G.check_hazards(f) == []
    bare = G.check_hazards(levers._fold_ln_inplace(base, 0.0, hazard_waits=False), limit=100000)
    assert any("oproj[l1]" in b and "after qkv[l1]" in b and "(r, r/a)" in b for b in bare)
    assert any("ffn2[l0]" in b and "after ffn1[l0]" in b and "(r, r/a)" in b for b in bare)
    assert any("oproj[l0]" in b and "after qkv[l0]" in b and "(r, w/a)" in b for b in bare)


def test_levers_compose_in_one_graph():
    """``bench.dag.levers`` with several levers: the K split, the attention split and the LayerNorm fold all show in
    one graph (the QKV tiles doubled, no LN2 task, the long attention tasks shorter), goals recounted, the order
    topological; a lever's own extra µs (``name:µs``) is parsed, and an unknown or repeated lever is refused."""
    from bench.dag import levers
    case = load_case("case04")
    base = host.graph_for(case, n_programs=264, cost_model="h200")
    specs = levers.parse_levers(["ln_fold:1.0", "qkv_split2", "attn_kv_split:2"], 0.3)
    assert specs == [("ln_fold", 1.0), ("qkv_split2", 0.3), ("attn_kv_split", 2.0)]
    g = levers.build(case, specs, kv_blocks=4, consumer_us=0.5)
    counts = g.counts()
    assert counts["qkv"] == 2 * base.counts()["qkv"] and counts["ln2"] == 0 and counts["attn"] == base.counts()["attn"]
    longest = max(t.cost for t in base.tasks if t.kind == G.ATTN)
    assert max(t.cost for t in g.tasks if t.kind == G.ATTN) < longest
    signalled = [0] * g.n_counters
    for t in g.tasks:
        for c in t.signals:
            signalled[c] += 1
    assert signalled == list(g.goals) and G.topological(g) == []
    for bad in (["nope"], ["ln_fold", "ln_fold:1"], ["ln_fold:x"]):
        with pytest.raises(SystemExit):
            levers.parse_levers(bad, 0.3)


def test_ncu_bound_parses_the_raw_page():
    """``bench.dag.ncu_bound.parse`` keeps the ``_dag_fwd`` and ``dag_ws_fwd`` rows of ``ncu --csv --page raw``, converts the duration to
    µs and sectors to GB, and leaves a missing metric as None."""
    from bench.dag.ncu_bound import METRICS, parse
    names = list(METRICS.values())
    header = ['"ID"', '"Kernel Name"'] + [f'"{m}"' for m in names]
    units = ['""', '""'] + ['"usecond"' if m == METRICS["duration_us"] else '"sector"'
                            if m.endswith("op_read.sum") else '"cycle/usecond"' if m == METRICS["sm_clock_ghz"]
                            else '""' for m in names]
    vals = {METRICS["duration_us"]: "431.5", METRICS["l2_read_sectors"]: "1,000,000", METRICS["tensor_pct"]: "18.2",
            METRICS["sm_clock_ghz"]: "1,755"}
    row = ['"0"', '"_dag_fwd"'] + [f'"{vals.get(m, "n/a")}"' for m in names]
    ws = ['"2"', '"dag_ws_fwd"'] + [f'"{vals.get(m, "n/a")}"' for m in names]   # form ws's kernel
    other = ['"1"', '"memset"'] + ['"1"' for _ in names]
    raw = "==PROF== Disconnected\n" + "\n".join(",".join(r) for r in (header, units, row, other, ws))
    recs = parse(raw)
    assert [r["kernel"] for r in recs] == ["_dag_fwd", "dag_ws_fwd"]
    for rec in recs:
        assert rec["duration_us"] == pytest.approx(431.5) and rec["tensor_pct"] == pytest.approx(18.2)
        assert rec["l2_read_gb"] == pytest.approx(0.032) and rec["dram_pct"] is None
        assert rec["sm_clock_ghz"] == pytest.approx(1.755)   # cycles a µs -> GHz


def test_interleave_probe_runs_its_sequences(tmp_path, capsys):
    """``bench.dag.interleave`` (the probe of docs/dag-results.md "Results" 14) runs every sequence on the CPU under the
    interpreter, writes one JSON per case with a time per call of each sequence, and refuses to run on a machine
    without a GPU unless asked to (``--cpu``)."""
    import json

    from bench.dag import interleave
    args = ["--out", str(tmp_path), "--cases", "smoke2", "--reps", "1", "--warmup", "0", "--sweep-mb", "1",
            "--idle-ms", "0", "--flush-mb", "0"]
    if not torch.cuda.is_available():
        assert interleave.main(args) == 2 and "--cpu" in capsys.readouterr().err
    assert interleave.main(args + ["--cpu"]) == 0
    rec = json.loads((tmp_path / "smoke2.json").read_text())
    assert set(rec["times_ms"]) == set(interleave.SEQUENCES)
    assert all(len(v) == 1 and v[0] > 0 for v in rec["times_ms"].values())
    assert not list(tmp_path.glob(".*.tmp"))


def test_ws_chain_probe_compiles_for_sm90_with_its_protocol():
    """``bench.dag.ws_chain`` (GPU only to run): the warp-specialized chain kernel (static lists and the ticket queue)
    and its `tl` twin compile for sm_90a with what they are measured with: TMA loads and three wgmma per K step, one acquire poll and one release per task,
    the proxy fences between the generic stores and the TMA reads, and the loader's registers handed over."""
    import json
    import os
    import subprocess
    import sys
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, "-m", "bench.dag.ws_chain", "--compile"], capture_output=True, text=True,
                         env=env, timeout=600, cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert out.returncode == 0, out.stderr[-2000:]
    r = json.loads(out.stdout.strip().splitlines()[-1])
    t = r["tl"]
    for ws in (r["ws"], r["ws_queue"]):
        assert ws["wgmma"] % 3 == 0 and ws["wgmma"] > 0 and ws["tma"] >= 4, ws
        assert ws["acquire"] == 1 and ws["release"] == 1 and ws["proxy_fence"] == 2 and ws["setmaxnreg"] > 0, ws
        assert ws["shared"] <= 232448, ws  # fits one H200 SM
    assert r["ws_queue"]["atomics"] > r["ws"]["atomics"], r  # the tickets
    assert t["wgmma"] % 3 == 0 and t["wgmma"] > 0 and t["cp_async"] > 0, t
    assert t["acquire"] == 1 and t["release"] == 1, t
    # the residual forms: the fp32 tile added with vector atomics (64 x 64 over 128 threads: 8 of 4 lanes), once
    assert r["ws"]["f32_adds"] == r["ws_queue"]["f32_adds"] == t["f32_adds"] == 0, r
    assert r["ws_queue_atomic"]["f32_adds"] == r["tl_atomic"]["f32_adds"] == 8, r
    assert r["ws_queue_atomic"]["release"] == 1 and r["ws_queue_atomic"]["proxy_fence"] == 2, r
    # ws2qs: the consumer rewrites A in shared memory before the products: one generic -> async proxy fence there,
    # the same products and protocol, no spills
    sp, q = r["ws_queue_split"], r["ws_queue"]
    assert sp["shared_fence"] == 1 and q["shared_fence"] == 0, r
    assert sp["wgmma"] == q["wgmma"] and sp["acquire"] == sp["release"] == 1 and sp["spill_stores"] == 0, r
    # ws2qx: the same split on a warpgroup of its own: 12 warps, its fence, the consumer's products and protocol
    # unchanged, no spills, in one SM's shared memory
    x = r["ws_queue_xsplit"]
    assert x["warps"] == 12 and x["shared_fence"] == 1 and x["wgmma"] == q["wgmma"], r
    assert x["acquire"] == x["release"] == 1 and x["spill_stores"] == 0 and x["shared"] <= 232448, r
    # ws2qr: A as fp32 rows split in the consumer's registers, wgmma's A from registers: as many wgmma (six of k = 32
    # halves a step), the same shared memory (two 64 x 32 fp32 boxes a slot), not serialized, no spills
    rg = r["ws_queue_rega"]
    assert rg["wgmma"] == q["wgmma"] == rg["wgmma_reg_a"] and rg["shared"] == q["shared"] and rg["shared_fence"] == 0, r
    assert rg["spill_stores"] == 0 and rg["wgmma_notes"] == [] and rg["acquire"] == rg["release"] == 1, r
    # ws2qrp: the same with its split's conversions paired (no scalar bf16 conversion left in the K loop's split)
    rp = r["ws_queue_rega_packed"]
    assert rp["wgmma"] == rg["wgmma"] and rp["spill_stores"] == 0 and rp["wgmma_notes"] == [], r
    assert rp["cvt_bf16x2"] > rg["cvt_bf16x2"] and rp["cvt_bf16"] < rg["cvt_bf16"], r
    # ws2qb: ws2q's K loop with the A pair from registers: every wgmma reads A from registers (ws2q's none), as many,
    # the same shared memory, not serialized, no spills
    rb = r["ws_queue_regb"]
    assert rb["wgmma"] == rb["wgmma_reg_a"] == q["wgmma"] and q["wgmma_reg_a"] == 0 and rb["shared"] == q["shared"], r
    assert rb["spill_stores"] == 0 and rb["wgmma_notes"] == [] and rb["acquire"] == rb["release"] == 1, r
    # ws2qf / ws2qt: the same protocol with the proxy fence in the signaller; ws2qt's two TMA stores (hi, lo) behind a
    # generic -> async proxy fence, no spills
    f, ts = r["ws_queue_fence_at_signal"], r["ws_queue_tma_store"]
    assert f["proxy_fence"] == 2 and f["tma_store"] == 0 and q["tma_store"] == 0, r
    assert ts["tma_store"] == 2 and ts["shared_fence"] == 1 and ts["release"] == 1 and ts["spill_stores"] == 0, r
    assert ts["shared"] <= 232448, ts


def test_mma_rate_probe_compiles_for_sm90():
    """``bench.dag.mma_rate`` (GPU only to run; docs/dag-results.md "Results" 42): each form is the wgmma it is named
    for, four instructions a K step (an fp16 product of depth 64, an fp8 one of 128, both in ``mix_m64``), one group
    left in flight a product; form ws's K steps and the int8 limb schemes' ("Results" 52) their products a step."""
    import json
    import os
    import subprocess
    import sys
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, "-m", "bench.dag.mma_rate", "--compile"], capture_output=True, text=True,
                         env=env, timeout=600, cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert out.returncode == 0, out.stderr[-2000:]
    r = json.loads(out.stdout.strip().splitlines()[-1])
    f16, f8 = "m64n128k16.f32.f16.f16", "m64n128k32.f32.e4m3.e4m3"
    assert r["fp16_m64"]["wgmma"] == r["fp16_m128"]["wgmma"] == {f16: 4}, r
    assert r["fp8_m64"]["wgmma"] == r["fp8_m128"]["wgmma"] == {f8: 4}, r
    assert r["mix_m64"]["wgmma"] == {f16: 4, f8: 4} and r["fp16x2_m64"]["wgmma"] == {f16: 8}, r
    assert r["mix_m64"]["waits"] == ["2", "0"] and r["fp16_m64"]["waits"] == ["1", "0"], r
    # form ws's K steps: the scheme's products a step at N = 64 or 128, the step's groups left in flight
    out = subprocess.run([sys.executable, "-m", "bench.dag.mma_rate", "--compile", "--forms", "bf16x3_n64",
                          "f16w1_n128", "i8x2_n64", "i8x2c_n128", "i8x2cb_n64", "i8x2cb4_n64"], capture_output=True,
                         text=True,
                         env=env,
                         timeout=600, cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert out.returncode == 0, out.stderr[-2000:]
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert r["bf16x3_n64"] == {"wgmma": {"m64n64k16.f32.bf16.bf16": 12}, "waits": ["3", "0"]}, r
    assert r["f16w1_n128"] == {"wgmma": {"m64n128k16.f32.f16.f16": 8}, "waits": ["2", "0"]}, r
    # the int8 limb schemes' K steps ("Results" 52): four (three) int8 products of depth 64, two k32 wgmma each
    assert r["i8x2_n64"] == {"wgmma": {"m64n64k32.s32.s8.s8": 8}, "waits": ["4", "0"]}, r
    assert r["i8x2c_n128"] == {"wgmma": {"m64n128k32.s32.s8.s8": 6}, "waits": ["3", "0"]}, r
    # drained (block scales): every step waits for all its products before the fold, or every fourth step
    assert r["i8x2cb_n64"]["wgmma"] == {"m64n64k32.s32.s8.s8": 6} and set(r["i8x2cb_n64"]["waits"]) == {"0"}, r
    assert r["i8x2cb4_n64"] == {"wgmma": {"m64n64k32.s32.s8.s8": 24}, "waits": ["3", "3", "3", "0", "0"]}, r


def test_mma_accum_probe_compiles_for_sm90():
    """``bench.dag.mma_accum`` (GPU only to run; docs/dag-results.md "Results" 43): each form issues its scheme's
    products a K step (bf16x3 three bf16 products of depth 64; the f16f8 forms an fp16 product of depth 64 and an fp8
    one of 128, ``f16f8_h`` the fp8 one into an fp16 accumulator), over the 4 K steps compiled."""
    import json
    import os
    import subprocess
    import sys
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, "-m", "bench.dag.mma_accum", "--compile"], capture_output=True, text=True,
                         env=env, timeout=600, cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert out.returncode == 0, out.stderr[-2000:]
    r = json.loads(out.stdout.strip().splitlines()[-1])
    f16 = "m64n128k16.f32.f16.f16"
    assert r["bf16x3"] == {"m64n128k16.f32.bf16.bf16": 12}, r
    assert r["f16f8_two"] == r["f16f8_one"] == {f16: 4, "m64n128k32.f32.e4m3.e4m3": 4}, r
    assert r["f16f8_h"] == {f16: 4, "m64n128k32.f16.e4m3.e4m3": 4}, r


def test_feed_rate_probe_compiles_for_sm90():
    """``bench.dag.feed_rate`` (GPU only to run; docs/dag-results.md "Results" 42): the ring's first stages − 1 steps
    and the loop's one step of ``boxes`` TMA copies each, one mbarrier wait, the ring in shared memory."""
    import json
    import os
    import subprocess
    import sys
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, "-m", "bench.dag.feed_rate", "--compile", "--boxes", "4", "6"],
                         capture_output=True, text=True, env=env, timeout=600,
                         cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert out.returncode == 0, out.stderr[-2000:]
    r = json.loads(out.stdout.strip().splitlines()[-1])
    for b in (4, 6):
        f = r[f"{b}x4"]
        assert f["tma"] == 4 * b and f["waits"] == 1 and f["cluster_ctas"] == 1, r
        assert 4 * b * 8192 <= f["shared"] <= 232448, r
    # a 2-CTA cluster whose every box is one tile for both CTAs: Triton 3.6 still issues a copy a CTA, none
    # multicast (docs/dag-results.md "Results" 46: a weight tile read once for two SMs needs the PTX written by hand)
    out = subprocess.run([sys.executable, "-m", "bench.dag.feed_rate", "--compile", "--boxes", "4", "--cluster", "2"],
                         capture_output=True, text=True, env=env, timeout=600,
                         cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert out.returncode == 0, out.stderr[-2000:]
    f = json.loads(out.stdout.strip().splitlines()[-1])["4x4"]
    assert f["cluster_ctas"] == 2 and f["tma"] == 16 and f["multicast"] == 0, f


def test_kloop_rate_probe_compiles_for_sm90():
    """``bench.dag.kloop_rate`` (GPU only to run): a pipelined K loop's step is its scheme's products (bf16x3 three
    bf16 products of depth 64, the int8 limb forms four or three int8 ones) and its four TMA boxes, the ring's first
    stages − 1 steps issued before the loop; int8 steps take half bf16x3's shared memory; no wgmma serialized by
    the folds, nor by the overlapped fold's add under the next products (the block-scaled forms at N = 64 fit one
    warpgroup's registers without spilling)."""
    import json
    import os
    import subprocess
    import sys
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, "-m", "bench.dag.kloop_rate", "--compile", "--forms", "bf16x3_n64",
                          "i8x2_n64", "i8x2cb_n64", "i8x2cb4_n64", "i8x2cbo_n64_k128"], capture_output=True,
                         text=True, env=env,
                         timeout=600, cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert out.returncode == 0, out.stderr[-2000:]
    r = json.loads(out.stdout.strip().splitlines()[-1])
    i8 = "m64n64k32.s32.s8.s8"
    assert r["bf16x3_n64/s4"]["wgmma"] == {"m64n64k16.f32.bf16.bf16": 12}, r
    assert r["i8x2_n64/s4"]["wgmma"] == {i8: 8} and r["i8x2cb_n64/s4"]["wgmma"] == {i8: 6}, r
    assert r["i8x2cb4_n64/s4"]["wgmma"] == {i8: 24}, r      # the fold period unrolled: four steps
    assert r["i8x2cbo_n64_k128/s4"]["wgmma"] == {i8: 12}, r  # 128 deep: four k32 wgmma a product
    for f in r.values():
        assert f["serialized"] == [] and f["spill_stores"] == 0, r
    assert r["bf16x3_n64/s4"]["tma"] == r["i8x2_n64/s4"]["tma"] == 3 * 4 + 4, r
    assert 2 * r["i8x2_n64/s4"]["shared"] - r["bf16x3_n64/s4"]["shared"] < 1024, r


def test_ws_chain_reference_is_the_split_operands_chain():
    """The probe's float64 reference multiplies what the kernel multiplies (hi + lo of x0 and every W), stage by
    stage; its launch bookkeeping has one task per (stage, row block, column tile)."""
    from bench.dag.ws_chain import Chain
    c = Chain(L=3, M=128, K=128, seed=1, device="cpu")
    assert (c.MB, c.NTN, c.TPS, c.n_tasks) == (2, 2, 4, 12)
    x = c.act_hi[:128].double() + c.act_lo[:128].double()
    w = (c.w_hi.double() + c.w_lo.double()).reshape(3, 128, 128)
    torch.testing.assert_close(c.ref, x @ w[0] @ w[1] @ w[2])
    torch.testing.assert_close(c.ref_r, x @ w[0] + x @ w[0] @ w[1] + x @ w[0] @ w[1] @ w[2])  # the residual forms' R
    assert float(c.r.abs().max()) == 0.0
    assert float((c.act_hi[128:].float()).abs().max()) == 0.0  # the stages' outputs start at zero
    with pytest.raises(AssertionError, match="multiples of 64"):
        Chain(L=1, M=100, K=128, device="cpu")


def test_levers_ws_preset_prices_on_form_ws_costs(capsys):
    """``bench.dag.levers --ws --param …``: the graph built for 132 programs with form ws's fitted costs (``WS``) and
    the parameters given (case 4, ``ctas_per_sm: 1``: K splits 4 / 4), the simulator's delays ws's; the module's
    settings put back to tl's for the next caller."""
    from bench.dag import levers
    saved = dict(levers.CFG)
    try:
        levers.main(["4", "--ws", "--param", "ctas_per_sm=1", "--lever", "attn_kv_split:2", "--seeds", "2"])
        assert levers.CFG["programs"] == 132 and levers.CFG["cost"] == levers.WS["cost"]
        g = levers._graph(load_case("case04"))
        assert g.tiling.cost == levers.WS["cost"] and (g.tiling.split_k_o, g.tiling.split_k_ffn2) == (4, 4)
    finally:
        levers.CFG.clear()
        levers.CFG.update(saved)
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-1].startswith("case04") and "%" in out[-1]
    assert levers._graph(load_case("case04")).tiling.cost == G.COST_MODELS["h200"]


def test_time_split_of_a_trace():
    """``bench.dag.time_split.split``: each program's time (first take to the launch's end) is split into the
    consumer's phases without loss, and a GEMM's K loop over its steps is its time a K step."""
    from bench.dag.time_split import split
    us = 1000  # ns
    # columns: 0 ticket, 1 wait done, 2 signalled, 3 program << 16, 4 work done, 5 taken, 6 K loop done, 7 unused
    trace = [[0, 1 * us, 9 * us, 0 << 16, 8 * us, 0, 6 * us, 0],            # program 0: QKV, deps met at 1 µs
             [0, 9 * us, 12 * us, 0 << 16, 11 * us, 9 * us, 0, 0],          # program 0: LayerNorm 9–11 µs
             [0, 0, 12 * us, 1 << 16, 12 * us, 2 * us, 10 * us, 0]]         # program 1: FFN2 from 2 µs
    r = split(trace, [1, 0, 6], {1: 5, 6: 4})
    assert r["kernel_us"] == 12 and r["programs"] == 2
    assert abs(sum(r["per_program_us"].values()) - 12) < 1e-9
    per = {k: v * 2 for k, v in r["per_program_us"].items()}   # totals over the two programs
    assert per["GEMM K loops"] == 5 + 8 and per["GEMM epilogues"] == 2 + 2 and per["LayerNorm"] == 2
    assert per["dependencies not met"] == 1 and per["between tasks"] == (1 + 1) + 2
    assert r["k_step"]["qkv"]["step_us"] == 1.0 and r["k_step"]["ffn2"]["step_us"] == 2.0


def test_critical_path_of_a_trace():
    """``bench.dag.time_split.critical_path``: from the task that finished last, each step goes to the later of the
    task's latest-released producer and its program's task before it; the segments add up to the launch's end."""
    from bench.dag.time_split import critical_path
    us = 1000  # ns
    # columns: 0 ticket, 1 wait done, 2 released, 3 program << 16, 4 done, 5 taken, 6 K loop done, 7 unused
    trace = [[0, 1 * us, 4 * us, 0 << 16, 3 * us, 0, 2 * us, 0],               # 0: LN1 on program 0, 1–3 µs
             [0, 0, 5 * us, 1 << 16, 4 * us, 0, 3 * us, 0],                    # 1: LN1 on program 1, 0–4 µs
             [0, 6 * us, 11 * us, 0 << 16, 10 * us, 3 * us, 9 * us, 0],        # 2: QKV after 0 and 1, 6–10 µs
             [0, 7 * us, 13 * us, 1 << 16, 12 * us, 11 * us, 0, 0]]            # 3: attention after 2, on program 1
    r = critical_path(trace, [0, 0, 1, 2], [[], [], [0, 1], [2]])
    assert r["kernel_us"] == 12 and r["tasks"] == 3
    seg = {k: v["us"] for k, v in r["segments"].items()}
    assert abs(sum(seg.values()) - 12) < 1e-9
    # 3 waited for 2's release (11 µs: a dependency edge, its release 1 µs, link 0); 2 for task 1's release at 5 µs
    # (later than task 0's at 4), link 1 µs; task 1 from the launch's start
    assert [p["kind"] for p in r["path"]] == ["ln1", "qkv", "attn"]
    assert seg["body attn"] == 1 and seg["body qkv"] == 4 and seg["body ln1"] == 4 and seg["launch start"] == 0
    assert seg["release (done to released)"] == 1 + 1 and seg["link (released to start)"] == 0 + 1
    # a program's earlier task that finished after the producer's release binds instead (a same-program edge)
    trace[3][1] = 5 * us
    trace[1][4], trace[1][2] = 4 * us, 4.5 * us
    trace[3][3] = 0 << 16   # attention on program 0 after QKV (done 10 µs); its producer released at 11 µs
    trace[2][2] = 9.5 * us
    r = critical_path(trace, [0, 0, 1, 2], [[], [], [0, 1], [2]])
    assert r["path"][-1]["edge"] == "program" and r["path"][-1]["gap_us"] == 1.0
    # the cooperative consumers stamp consumer 0's done only: a task that consumer 1 ran ends where the signaller
    # took it (column 7), less a hand-over
    from bench.dag.time_split import HANDOFF_NS, work_done
    assert work_done([0, 0, 0, 0, 5 * us, 0, 0, 0]) == 5 * us                     # column 7 not stamped
    assert work_done([0, 0, 0, 0, 5 * us, 0, 0, 5 * us + 100]) == 5 * us           # within a hand-over
    assert work_done([0, 0, 0, 0, 5 * us, 0, 0, 9 * us]) == 9 * us - HANDOFF_NS


def test_replay_of_a_trace_reproduces_its_schedule_and_prices_what_ifs():
    """``bench.dag.replay``: a trace whose bodies and links are a queue schedule's (``sim.timed``) replays to that
    schedule's makespan exactly; shorter links and bodies never lengthen it; a bad what-if names the fix."""
    import dataclasses

    import pytest
    from bench.dag import replay as R
    from bench.dag.time_split import trace_graph
    from kernels.dag import graph as G
    from kernels.dag import sim
    # the graph as replay rebuilds it from a saved trace's case, parameters, kinds and programs (132: one an SM)
    g = _smoke2_graph()
    one = [0, 0, 0, 131 << 16, 0, 0, 0, 0]
    assert trace_graph(dict(case="smoke2", params={"ctas_per_sm": 1}, kinds=[t.kind for t in g.tasks],
                            trace=[one])).producers == g.producers
    g.tasks = [dataclasses.replace(t, cost=0.5 + (i % 7) * 0.3) for i, t in enumerate(g.tasks)]
    res = sim.timed(g, 132, "queue", 0.0, 0.3, 1.4)
    # the schedule as a trace: (start, finish) per task from the same simulation, re-run step by step
    import heapq
    free, start, finish = [(0.0, k) for k in range(132)], [], []
    heapq.heapify(free)
    for i, t in enumerate(g.tasks):
        t_free, k = heapq.heappop(free)
        st = max([t_free + 0.3] + [finish[p] + 1.4 for p in g.producers[i]])
        start.append(st)
        finish.append(st + t.cost)
        heapq.heappush(free, (finish[-1], k))
    us = 1000
    trace = [[0, s * us, f * us, 0, f * us, s * us, 0, 0] for s, f in zip(start, finish)]
    body = R.bodies(trace)
    assert body == pytest.approx([t.cost for t in g.tasks])
    base = R.replay(g, body, 1.4, 0.3)
    assert base == pytest.approx(res.makespan_us) and base == pytest.approx(max(finish))
    assert R.replay(g, body, 1.4, 0.3, R.parse_what_if("link=0.7")) <= base
    assert R.replay(g, body, 1.4, 0.3, R.parse_what_if("task=-0.2 gemm=0.9")) <= base
    assert R.parse_what_if("attn=0.5 link=1.0") == {"attn": 0.5, "link": 1.0}
    # epilogues within the bodies: halved on every task of 1 µs (an upper bound on its change), never longer
    epi = [min(1.0, d) for d in body]
    assert R.replay(g, body, 1.4, 0.3, R.parse_what_if("epi=0.5"), epi=epi) <= base
    with pytest.raises(ValueError, match="epilogues"):
        R.replay(g, body, 1.4, 0.3, R.parse_what_if("epi=0.5"))
    # K loops within the bodies: the trace's column 6 (the K loop's end) on every other task, halfway through
    kt = [r[:6] + [(r[5] + r[4]) / 2 if i % 2 else 0] + r[7:] for i, r in enumerate(trace)]
    kl = R.kloops(kt)
    assert kl == pytest.approx([(f - s) / 2 if i % 2 else 0.0 for i, (s, f) in enumerate(zip(start, finish))])
    assert R.replay(g, body, 1.4, 0.3, R.parse_what_if("kloop=1"), kloop=kl) == pytest.approx(base)
    half = R.replay(g, body, 1.4, 0.3, R.parse_what_if("kloop=0.5"), kloop=kl)
    assert half <= base and half >= R.replay(g, body, 1.4, 0.3, R.parse_what_if("kloop=0"), kloop=kl)
    with pytest.raises(ValueError, match="K loops"):
        R.replay(g, body, 1.4, 0.3, R.parse_what_if("kloop=0.5"))
    # the same tasks in another queue order keep their bodies
    g2, b2 = R.reordered(g, dict(case="smoke2", params={"ctas_per_sm": 1}, trace=[one]), body, "measured", 1.4)
    assert sorted(b2) == pytest.approx(sorted(body)) and len(g2.tasks) == len(g.tasks)
    assert not G.topological(g2)
    with pytest.raises(SystemExit, match="NAME=VALUE"):
        R.parse_what_if("fast=2")
    with pytest.raises(SystemExit, match="not a number"):
        R.parse_what_if("link=x")


def test_replay_paired_takes_gemm_tasks_by_row_block_pairs():
    """``bench.dag.replay.pairs`` / ``replay_paired``: a GEMM task goes with the same kind, layer, column tile and K
    split on the other row block of its pair, every other task alone; a pair runs on one cluster's two programs from
    the later of both free and both tasks' dependencies (a link after each producer) for the longer body; ``kloop``
    shortens the paired tasks' K loops only."""
    import types

    import pytest
    from bench.dag import replay as R
    from kernels.dag.graph import Task
    from kernels import load_case
    from kernels.dag import graph as G
    from kernels.dag import host
    case = load_case("case02")   # 256 tokens: 4 row blocks, 2 pairs
    o = host.check_params({"ctas_per_sm": 1})
    g = G.build(case, host.tiling_for(case, o, 132), o["order"], 132)
    groups = R.pairs(g)
    assert sorted(i for grp in groups for i in grp) == list(range(len(g.tasks)))
    two = [grp for grp in groups if len(grp) == 2]
    assert all((len(grp) == 2) == (g.tasks[grp[0]].kind in (1, 3, 5, 6)) for grp in groups)   # every GEMM paired
    for i, j in two:
        ti, tj = g.tasks[i], g.tasks[j]
        assert (ti.kind, ti.layer, ti.b, ti.c, ti.a // 2) == (tj.kind, tj.layer, tj.b, tj.c, tj.a // 2) and ti.a != tj.a
    # an LN task (1 µs), then QKV on row blocks 0 and 1 (2 and 3 µs) after it, on one cluster
    toy = types.SimpleNamespace(tasks=[Task(kind=0, layer=0, a=0), Task(kind=1, layer=0, a=0), Task(kind=1, layer=0,
                                                                                                     a=1)],
                                producers=[[], [0], [0]])
    assert R.pairs(toy) == [(0, ), (1, 2)]
    body, kl = [1.0, 2.0, 3.0], [0.0, 2.0, 2.0]
    for d in ("first", "cluster"):   # LN 0.3-1.3; the pair from 1.3 + 1.4 for max(2, 3)
        assert R.replay_paired(toy, body, 1.4, 0.3, {}, 2, kloop=kl, dispatch=d) == pytest.approx(5.7)
        assert R.replay_paired(toy, body, 1.4, 0.3, {"kloop": 0.5}, 2, kloop=kl, dispatch=d) == pytest.approx(4.7)
    assert R.replay_paired(toy, body, 1.0, 0.3, {"link": 0.5}, 2, kloop=kl) == pytest.approx(4.8)
    with pytest.raises(ValueError, match="dispatch"):
        R.replay_paired(toy, body, 1.4, 0.3, {}, 2, dispatch="any")
    with pytest.raises(ValueError, match="K loops"):
        R.replay_paired(toy, body, 1.4, 0.3, {"kloop": 0.5}, 2)


def test_time_split_step_bytes_by_scheme_and_tile():
    """``bench.dag.time_split.step_bytes``: a 64-deep K step's operand bytes a GEMM kind, by its scheme's parts and
    its tile (64-row A tiles in hi / lo, W tiles of block_n columns in the scheme's parts)."""
    import dataclasses

    import pytest
    from bench.dag.time_split import step_bytes
    from kernels.dag import graph as G
    t = G.Tiling(block_n_qkv=64, block_n_o=128, block_n_ffn1=64, block_n_ffn2=128, scheme_ffn1="f16_w1")
    assert step_bytes(t) == dict(qkv=32768, oproj=49152, ffn1=24576, ffn2=49152)
    t12 = dataclasses.replace(t, block_m=128, block_n_qkv=128, scheme_qkv="f16f8", block_n_ffn1=128)
    assert step_bytes(t12) == dict(qkv=65536, oproj=65536, ffn1=49152, ffn2=65536)
    with pytest.raises(ValueError, match="scheme"):
        step_bytes(dataclasses.replace(t, scheme_o="fp4"))


def _smoke2_graph():
    from kernels import load_case
    from kernels.dag import graph as G
    from kernels.dag import host
    case = load_case("smoke2")
    o = host.check_params({"ctas_per_sm": 1})
    return G.build(case, host.tiling_for(case, o, 132), o["order"], 132)


def test_f16f8_weight_parts_hold_the_weight_k_major():
    """``host._weight_parts`` for f16f8 (form ws, docs/dag-results.md "Results" 42-44): hi the fp16 rounding; per
    64-deep K step a K-major [bn, 128] fp8 tile, columns 0-63 fp8(hi · s) and 64-127 fp8((w − hi) · 2^11 · s), s per
    layer a power of two with max |w| · s <= 224; ``inv`` = 1 / (2^11 s). Rebuilt from the parts, the weight is back to
    within e4m3's rounding of the 2^-11-sized rest; the hi copy within e4m3's rounding of hi."""
    import torch
    from kernels.dag import host
    g = torch.Generator().manual_seed(0)
    L, nb, K, bn = 2, 3, 128, 64
    w = torch.randn(L, nb, K, bn, generator=g) * torch.tensor([0.02, 0.5])[:, None, None, None]
    hi, lo, inv = host._weight_parts(w, "f16f8", True)
    assert hi.dtype == torch.float16 and lo.dtype == torch.float8_e4m3fn and lo.shape == (L, nb, K // 64, bn, 128)
    s = 1.0 / (inv * host.F8_A_SCALE)
    assert torch.all(torch.log2(s) == torch.round(torch.log2(s)))                       # powers of two
    assert torch.all(w.abs().reshape(L, -1).amax(1) * s <= 224) and torch.all(w.abs().reshape(L, -1).amax(1) * s > 112)
    parts = lo.float().reshape(L, nb, K // 64, bn, 2, 64)                              # [.., n, part, k]
    hi8 = parts[..., 0, :].permute(0, 1, 2, 4, 3).reshape(L, nb, K, bn)                  # back to [L, nb, K, bn]
    rest8 = parts[..., 1, :].permute(0, 1, 2, 4, 3).reshape(L, nb, K, bn)
    sc = s[:, None, None, None]
    rebuilt = hi.float() + rest8 / (host.F8_A_SCALE * sc)
    rest = (w - hi.float()).abs()
    # e4m3 rounds to nearest with 3 mantissa bits (half an ulp: 1/16 of the value) down to 2^-6, then in steps of
    # 2^-9 (subnormals: half a step 2^-10), in the scaled domain; plus fp32's rounding of the sum
    sub = 2.0 ** -10 / (host.F8_A_SCALE * sc)
    assert torch.all((rebuilt - w).abs() <= rest / 16 + sub + w.abs() * 2.0 ** -23)
    assert torch.all((hi8 / sc - hi.float()).abs() <= hi.float().abs() / 16 + 2.0 ** -10 / sc)
    assert (rebuilt - w).abs().max() < (w - hi.float()).abs().max() / 8            # the parts add precision


def _bench_cli(module: str, *args: str, timeout: int = 600):
    """``python -m bench.dag.<module> args`` from the repository root, off the Triton interpreter (a compile for
    sm_90a); the finished process."""
    import os
    import subprocess
    import sys
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return subprocess.run([sys.executable, "-m", f"bench.dag.{module}", *args], capture_output=True, text=True,
                          env=env, timeout=timeout, cwd=root)


def test_mcast_feed_probe_compiles_for_sm90():
    """``bench.dag.mcast_feed`` (GPU only to run; docs/dag-results.md "Results" 46): both forms compile for a 2-CTA
    cluster through ptxas; ``copy`` loads every box itself, ``mcast`` its A boxes plainly and each W box as a multicast
    (half of them a CTA, chosen at run time); the ring is the kernel's only shared memory (its PTX addresses start at
    0); two bounded wait sites, the slots' full and empty mbarriers, the empty ones arrived on in both CTAs, a slot
    refilled at once or ``--lags`` steps later alike, released in its own CTA only (form ``local``) or by relaxed
    arrivals; each CTA stores its own row; bad steps and lags are refused with the fix."""
    import json
    out = _bench_cli("mcast_feed", "--compile", "--steps", "2x2", "2x4", "--lags", "0", "1")
    assert out.returncode == 0, out.stderr[-2000:]
    r = json.loads(out.stdout.strip().splitlines()[-1])
    for a, w, g in ((2, 2, 0), (2, 4, 0), (2, 2, 1), (2, 4, 1)):
        c, m = r[f"copy_{a}x{w}_lag{g}"], r[f"mcast_{a}x{w}_lag{g}"]
        # the prologue's 4 steps unrolled, then the loop's one
        assert c["copies"] == 5 * (a + w) and c["multicast"] == 0, r
        assert m["copies"] == 5 * a and m["multicast"] == 5 * w, r
        for f in (c, m):
            assert f["cluster_ctas"] == 2 and f["shared"] == f["need"] <= 232448, f
            assert f["waits"] == 2 and f["inits"] == 8 and f["remote_arrives"] == 2, f
            # each CTA stores its own row (three int64, unmasked by rank: Triton's own store masked rank 1 off)
            assert f["stores"] == 3 and f["rank_reads"] == 1, f
    # the slot's release in its own CTA only (form local), or in both without release semantics (--arrive relaxed)
    out = _bench_cli("mcast_feed", "--compile", "--steps", "2x2", "--forms", "local", "copy", "--arrive", "relaxed",
                     "--arrivers", "32", "--wait", "plain")
    assert out.returncode == 0, out.stderr[-2000:]
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert r["local_2x2_lag0"]["remote_arrives"] == 0 and r["local_2x2_lag0"]["local_arrives"] == 1, r
    assert r["copy_2x2_lag0"]["remote_arrives"] == 2 and r["copy_2x2_lag0"]["local_arrives"] == 0, r
    assert all(f["waits"] == 2 and f["copies"] == 20 for f in r.values()), r
    bad = _bench_cli("mcast_feed", "--compile", "--steps", "2x3", timeout=120)
    assert bad.returncode != 0 and "even number of W boxes" in bad.stderr, bad.stderr[-500:]
    bad = _bench_cli("mcast_feed", "--compile", "--lags", "4", timeout=120)
    assert bad.returncode != 0 and "--lags from 0 to --stages - 1" in bad.stderr, bad.stderr[-500:]


def test_race_hunt_summary_says_where_the_non_finite_values_are():
    """``bench.dag.race_hunt.summarize`` (its GPU loop is lab only): the output's non-finite count and sequences; the
    q / k / v copies by layer, part and sequence; the row-major buffers by sequence; an fp8 part's NaN byte counted;
    each buffer's non-finite positions and the output's rows."""
    from bench.dag.race_hunt import summarize
    B, S, D, L, H, dh = 2, 8, 4, 2, 2, 2
    y = torch.zeros(B, S, D)
    y[1] = float("nan")
    qkv = torch.zeros(L, 3, B, H, S, dh)
    qkv[0, 2, 1, 0, 3] = float("inf")
    r = torch.zeros(B * S, D)
    r[S + 2] = float("nan")
    f = torch.zeros(4, B * S, D)
    f[3, 1, 0] = float("nan")
    lo = torch.zeros(B * S, 2 * D, dtype=torch.float8_e4m3fn)
    lo[S, 0] = float("nan")
    out = summarize(y, {"qkv_hi_ptr": qkv, "r_ptr": r, "f_hi_ptr": f, "att_lo_ptr": lo, "ln1_hi_ptr": torch.zeros(3)},
                    B)
    assert out["y"] == S * D and out["y_sequences"] == [1] and out["y_rows"] == list(range(S, 2 * S))
    assert out["buffers"]["qkv_hi_ptr"] == {"count": dh, "by_layer_part_sequence": {"0/v/1": dh},
                                            "positions": [[0, 2, 1, 0, 3, j] for j in range(dh)]}
    assert out["buffers"]["r_ptr"] == {"count": D, "sequences": [1], "positions": [[S + 2, j] for j in range(D)]}
    assert out["buffers"]["f_hi_ptr"] == {"count": 1, "sequences": [0], "positions": [[3, 1, 0]]}
    assert out["buffers"]["att_lo_ptr"] == {"count": 1, "sequences": [1], "positions": [[S, 0]]}
    assert out["buffers"]["ln1_hi_ptr"] == {"count": 0}
    from bench.dag.race_hunt import poison_scratch
    t = {"r_ptr": torch.zeros(3), "att_lo_ptr": torch.zeros(3, dtype=torch.float8_e4m3fn), "x_ptr": torch.zeros(3)}
    poison_scratch(t)
    assert t["r_ptr"].isnan().all() and t["att_lo_ptr"].float().isnan().all() and not t["x_ptr"].isnan().any()
    from bench.dag.race_hunt import differ   # --compare and the re-run: finite elements only
    a, b = torch.zeros(2, 3, 4), torch.zeros(2, 3, 4)
    a[1, 0, 2], b[0, 1, 1], b[1, 2, 3] = 0.5, float("nan"), 1e-4
    assert differ(a, b, 1e-3) == {"elements": 1, "max_abs": 0.5, "rows": [3], "columns": [2]}
    assert differ(b, b, 0.0)["elements"] == 0
    from bench.dag.race_hunt import withdrawn_form   # the form it hunts: case 12's choice at 72ddb83
    f = withdrawn_form()
    assert (f["block_m"], f["ws_consumers"], f["ws_stages"], f["scheme_qkv"], f["split_k_o"], f["ln_chunk"]) == \
        (128, 2, 3, "f16f8", 2, 4096), f
