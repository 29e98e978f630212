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


_LOOP = """\
      %acc:2 = scf.for %i = %c0_i32 to %c8_i32 step %c1_i32 iter_args(%arg33 = %cst, %arg34 = %false) -> (tensor<64x128xf32, #mma1>, i1)  : i32 {{
{pre}        %a1 = ttng.warp_group_dot %x, %y, {c1}, %arg34 {{inputPrecision = 0 : i32, isAsync = true}} : !ttg.memdesc<64x32xbf16, #shared, #smem, mutable> * !ttg.memdesc<32x128xbf16, #shared1, #smem, mutable> -> tensor<64x128xf32, #mma1>
        %w1:3 = ttng.warp_group_dot_wait %a1, %x, %y {{pendings = 1 : i32}} : tensor<64x128xf32, #mma1>, !ttg.memdesc<64x32xbf16, #shared, #smem, mutable>, !ttg.memdesc<32x128xbf16, #shared1, #smem, mutable>
        %a2 = ttng.warp_group_dot %x, %y, %w1#0 {{inputPrecision = 0 : i32, isAsync = true}} : !ttg.memdesc<64x32xbf16, #shared, #smem, mutable> * !ttg.memdesc<32x128xbf16, #shared1, #smem, mutable> -> tensor<64x128xf32, #mma1>
        %w2:3 = ttng.warp_group_dot_wait %a2, %x, %y {{pendings = 2 : i32}} : tensor<64x128xf32, #mma1>, !ttg.memdesc<64x32xbf16, #shared, #smem, mutable>, !ttg.memdesc<32x128xbf16, #shared1, #smem, mutable>
        %a3 = ttng.warp_group_dot %x, %y, %w2#0 {{inputPrecision = 0 : i32, isAsync = true}} : !ttg.memdesc<64x32xbf16, #shared, #smem, mutable> * !ttg.memdesc<32x128xbf16, #shared1, #smem, mutable> -> tensor<64x128xf32, #mma1>
        %w3:3 = ttng.warp_group_dot_wait %a3, %x, %y {{pendings = 0 : i32}} : tensor<64x128xf32, #mma1>, !ttg.memdesc<64x32xbf16, #shared, #smem, mutable>, !ttg.memdesc<32x128xbf16, #shared1, #smem, mutable>
        %t = ttg.async_copy_global_to_local %p, %buf : tensor<64x32x!tt.ptr<bf16>, #blocked> -> <64x32xbf16, #shared, #smem, mutable>
{mid}        %c = arith.cmpi eq, %i, %c7_i32 : i32
        scf.if %c {{
          %e = arith.addf %w3#0, %b : tensor<64x128xf32, #mma1>
          tt.store %o, %e : tensor<64x128x!tt.ptr<f32>, #mma1>
        }}
        scf.yield %w3#0, %true : tensor<64x128xf32, #mma1>, i1
      }}
      %after = ttng.warp_group_dot_wait %acc#0 {{pendings = 0 : i32}} : tensor<64x128xf32, #mma1>
"""


def _loop(pre="", mid="", c1="%arg33"):
    return _LOOP.format(pre=pre, mid=mid, c1=c1)


def test_defer_step_waits_keeps_a_step_in_flight_and_waits_in_the_epilogue():
    from kernels.common.wgmma_passes import defer_step_waits
    text, n = defer_step_waits(_loop())
    assert n == 1
    lines = text.splitlines()
    waits = [ln for ln in lines if "warp_group_dot_wait %a" in ln]
    assert ["pendings = 4" in waits[0], "pendings = 5" in waits[1], "pendings = 3" in waits[2]] == [True] * 3
    i = next(k for k, ln in enumerate(lines) if ln.strip().startswith("scf.if %c"))
    assert lines[i + 1].strip() == ("%acc_step_done_0 = ttng.warp_group_dot_wait %w3#0 {pendings = 0 : i32} : "
                                    "tensor<64x128xf32, #mma1>")
    assert "arith.addf %acc_step_done_0, %b" in lines[i + 2]
    assert any(ln.strip().startswith("scf.yield %w3#0,") for ln in lines)  # in flight into the next step
    assert "%after = ttng.warp_group_dot_wait %acc#0 {pendings = 0 : i32}" in text  # after the loop: unchanged


@pytest.mark.parametrize("kw", [
    dict(pre="        %s = ttg.local_store %v, %buf : tensor<64x32xbf16, #blocked> -> !ttg.memdesc<64x32xbf16>\n"),
    dict(pre="        %t0 = ttg.async_copy_global_to_local %p, %buf : tensor<64x32x!tt.ptr<bf16>, #blocked> -> "
             "<64x32xbf16, #shared, #smem, mutable>\n"),
    dict(mid="        %z = arith.addf %w3#0, %b : tensor<64x128xf32, #mma1>\n"),
    dict(c1="%cst"),
])
def test_defer_step_waits_leaves_loops_it_cannot_prove_safe(kw):
    """A shared-memory write before the step's last wait (a later step's copy could then overwrite operands the
    previous step's dots still read), a read of the accumulator outside the epilogue branch, or a chain that does
    not start from the loop-carried accumulator: no change."""
    from kernels.common.wgmma_passes import defer_step_waits
    text = _loop(**kw)
    assert defer_step_waits(text) == (text, 0)


def test_hopper_wgmma_passes_names_the_fix_when_triton_lacks_a_hook(monkeypatch):
    from triton._C.libtriton import passes

    from kernels.common.wgmma_passes import hopper_wgmma_passes
    monkeypatch.delattr(passes.ttgpuir, "add_optimize_accumulator_init")
    with pytest.raises(RuntimeError, match="acc_reset=branch"):
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
