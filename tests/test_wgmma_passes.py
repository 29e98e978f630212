"""kernels/common/wgmma_passes.py: which waits of a wgmma chain are relaxed (on a stand-in for Triton's TTGIR
module, no compile), and what the two compile-time edits do to the seqres kernel compiled for sm_90a."""
import pytest

from kernels.common.wgmma_passes import relax_chains


class _Val:
    _n = 0

    def __init__(self):
        _Val._n += 1
        self._id = _Val._n
        self.attrs = {}

    def id(self):
        return self._id

    def set_attr(self, name, value):
        self.attrs[name] = value


class _Op:
    def __init__(self, name, operands, n_results=1, block=0):
        self.name, self.operands, self.block = name, operands, block
        self.results = [_Val() for _ in range(n_results)]

    def get_name(self):
        return self.name

    def get_num_operands(self):
        return len(self.operands)

    def get_operand(self, i):
        return self.operands[i]

    def get_num_results(self):
        return len(self.results)

    def get_result(self, i):
        return self.results[i]

    def get_block(self):
        return _Val.__new__(_Block).with_id(self.block)


class _Block:
    def with_id(self, i):
        self.i = i
        return self

    def id(self):
        return self.i


class _Module:
    def __init__(self, ops, pendings):
        self.ops, self.pendings = ops, pendings

    def walk(self, fn):
        for op in self.ops:
            fn(op)

    def str_nodebug(self):
        return "\n".join(f"%w = ttng.warp_group_dot_wait %x {{pendings = {p} : i32}}" for p in self.pendings)


def _chain(between=None, final_pending=0, extra_use_of_first=False, last_block=0):
    """dot, wait, dot, wait, dot, wait on one accumulator, then a store of the result; ``between`` is put after
    the first wait."""
    a, b, c0 = _Val(), _Val(), _Val()
    ops = []
    acc = c0
    waits = []
    for n in range(3):
        d = _Op("ttng.warp_group_dot", [a, b, acc])
        ops.append(d)
        w = _Op("ttng.warp_group_dot_wait", [d.get_result(0), a, b], 3, block=last_block if n == 2 else 0)
        ops.append(w)
        waits.append(w)
        acc = w.get_result(0)
        if n == 0 and between:
            ops.append(_Op(between, [a]))
        if n == 0 and extra_use_of_first:
            ops.append(_Op("arith.addf", [acc, acc]))
    ops.append(_Op("tt.store", [_Val(), acc], 0))
    return _Module(ops, [0, 0, final_pending]), waits


def _pendings(waits):
    return [w.get_result(0).attrs.get("pendings") for w in waits]


def test_relax_chains_relaxes_the_waits_inside_a_chain_only():
    mod, waits = _chain()
    assert relax_chains(mod, int_attr=lambda n: n) == 2
    assert _pendings(waits) == [1, 2, None]  # the chain's last wait stays: it orders the shared-memory operands


@pytest.mark.parametrize("kw", [dict(between="tt.store"), dict(between="ttg.async_copy_global_to_local"),
                                dict(between="scf.if"), dict(final_pending=1), dict(last_block=1)])
def test_relax_chains_leaves_a_chain_with_a_write_a_branch_or_no_final_wait(kw):
    mod, waits = _chain(**kw)
    assert relax_chains(mod, int_attr=lambda n: n) == 0
    assert _pendings(waits) == [None, None, None]


def test_relax_chains_keeps_a_wait_whose_result_is_read_outside_the_chain():
    mod, waits = _chain(extra_use_of_first=True)
    assert relax_chains(mod, int_attr=lambda n: n) == 1
    assert _pendings(waits) == [None, 1, None]


def test_relax_chains_changes_nothing_when_the_text_does_not_match_the_walk():
    mod, waits = _chain()
    mod.pendings = [0, 0]
    assert relax_chains(mod, int_attr=lambda n: n) == 0


def _pipelined_chain(before=None, acc_from_op=False, extra_use_of_last=False):
    """A software-pipelined K step: [before], dot (accumulating into the loop-carried value), wait, dot, wait, dot
    whose result goes to scf.yield with no wait (the last dot runs on into the next iteration)."""
    a, b = _Val(), _Val()
    ops = []
    if before:
        ops.append(_Op(before, [a]))
    if acc_from_op:
        ops.append(_Op("arith.mulf", [_Val(), _Val()]))
        acc = ops[-1].get_result(0)
    else:
        acc = _Val()  # a block argument: no op makes it
    waits = []
    for n in range(3):
        d = _Op("ttng.warp_group_dot", [a, b, acc])
        ops.append(d)
        if n == 2:
            break
        w = _Op("ttng.warp_group_dot_wait", [d.get_result(0), a, b], 3)
        ops.append(w)
        waits.append(w)
        acc = w.get_result(0)
    if extra_use_of_last:
        ops.append(_Op("tt.store", [_Val(), d.get_result(0)], 0))
    ops.append(_Op("scf.yield", [d.get_result(0)], 0))
    return _Module(ops, [0, 0]), waits


def test_relax_chains_inflight_end_relaxes_a_pipelined_k_step():
    """The pipelined shape has no wait after its last dot: with ``inflight_end`` every wait of the chain is
    intermediate (the first keeps the groups before the chain ordered: pendings 1); without it nothing changes."""
    mod, waits = _pipelined_chain()
    assert relax_chains(mod, int_attr=lambda n: n) == 0
    assert _pendings(waits) == [None, None]
    assert relax_chains(mod, int_attr=lambda n: n, inflight_end=True) == 2
    assert _pendings(waits) == [1, 2]


@pytest.mark.parametrize("kw", [dict(before="ttg.async_copy_global_to_local"), dict(before="ttg.local_store"),
                                dict(before="scf.if"), dict(acc_from_op=True), dict(extra_use_of_last=True)])
def test_relax_chains_inflight_end_leaves_other_shapes(kw):
    """A shared-memory write or a region before the chain in the loop body, an accumulator that is not the
    loop-carried value, or a last dot whose result is read before the yield: no wait is relaxed."""
    mod, waits = _pipelined_chain(**kw)
    assert relax_chains(mod, int_attr=lambda n: n, inflight_end=True) == 0
    assert _pendings(waits) == [None, None]


def test_hopper_wgmma_passes_names_what_triton_lacks(monkeypatch):
    from triton._C.libtriton import passes

    from kernels.common.wgmma_passes import hopper_wgmma_passes
    monkeypatch.delattr(passes.ttgpuir, "add_optimize_accumulator_init")
    with pytest.raises(RuntimeError, match="add_optimize_accumulator_init"):
        with hopper_wgmma_passes():
            pass


def test_hopper_wgmma_passes_restores_triton_on_exit():
    from triton import knobs
    from triton._C.libtriton import passes

    from kernels.common.wgmma_passes import hopper_wgmma_passes
    before = (passes.ttgpuir.add_assign_latencies, knobs.runtime.add_stages_inspection_hook)
    with hopper_wgmma_passes(relax=True):
        assert passes.ttgpuir.add_assign_latencies is not before[0]
        assert knobs.runtime.add_stages_inspection_hook is not None
    assert (passes.ttgpuir.add_assign_latencies, knobs.runtime.add_stages_inspection_hook) == before
