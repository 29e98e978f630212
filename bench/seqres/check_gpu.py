"""GPU check of seqres: the SPEC §4 gate (all scales x seeds, reference with TF32 off) and do_bench
median time next to the ``eager_sdpa`` peer, per case and per parameter set; one table at the end.

    python -m bench.seqres.check_gpu --out $OUT [--cases 1 5 6 7 9 10 11] [--sweep [--configs NAME ...]]
                                     [--budget-s 200] [--precompile 12]

``--sweep`` also tries the parameter sets of ``SWEEP`` (after the defaults of config/variant/seqres.yaml,
for every case first) until ``--budget-s`` is spent. Writes ``<out>/seqres_check.json`` (rewritten after
every case/config, so a timeout keeps what was measured) and ``<out>/seqres_check.txt``.
"""
from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import time
from pathlib import Path

import torch
import triton

from kernels.cases import list_cases, load_case
from kernels.gate import default_gate_config, gate
from kernels.reference import reference_forward
from kernels.registry import get_variant
from kernels.weights import make_input, make_weights
from kernels.seqres.host import DEFAULTS, launch, prepare_one, tune_candidates
from kernels.timing import median_ms

SCALES = default_gate_config().scales
SEEDS = default_gate_config().seeds
CASES = tuple(load_case(n).number for n in list_cases(smoke=False, family="seqres"))
_CB = dict(ln_stats="chunked", tile_order="blocked")
_CBP = dict(ln_stats="chunked", tile_order="blocked", presplit_weights=True)
_NEST64 = dict(gemm_loop="nested", block_n=64, block_n_wide=64)
_AFN = dict(_NEST64, attn_oproj=True, ffn_fused=True)  # the fusions on the nested loop, 64-wide tiles (case 10's pick)
# name -> overrides of the yaml defaults at run time (so an entry's meaning moves with the defaults; every result
# records its full parameter set); --configs picks and orders them. Names and outcomes: docs/seqres.md.
SWEEP = {
    "p_s3_2cta": dict(presplit_weights=True, num_stages=3, ctas_per_sm=2, max_split=16),
    "cbp_s3_3cta": dict(_CBP, num_stages=3, ctas_per_sm=3, max_split=16, maxnreg=168),
    "p_s3_3cta": dict(presplit_weights=True, num_stages=3, ctas_per_sm=3, max_split=16, maxnreg=168),
    "cbp_s3_4cta": dict(_CBP, num_stages=3, ctas_per_sm=4, max_split=16, maxnreg=128),
    "p_s3_4cta": dict(presplit_weights=True, num_stages=3, ctas_per_sm=4, max_split=16, maxnreg=128),
    "cbp_s4_2cta": dict(_CBP, num_stages=4, ctas_per_sm=2, max_split=16),
    "p_s3_2cta_bn32": dict(presplit_weights=True, num_stages=3, ctas_per_sm=2, max_split=16, block_n=32),
    "p_s3_w8_2cta": dict(presplit_weights=True, num_stages=3, num_warps=8, ctas_per_sm=2, max_split=16, maxnreg=128),
    "p_s3_2cta_bk64": dict(presplit_weights=True, num_stages=3, ctas_per_sm=2, max_split=16, block_k=64),
    "p_s4_2cta": dict(presplit_weights=True, num_stages=4, ctas_per_sm=2, max_split=16),
    "p_s2_2cta": dict(presplit_weights=True, num_stages=2, ctas_per_sm=2, max_split=16),
    "p_s3_2cta_bm32": dict(presplit_weights=True, num_stages=3, ctas_per_sm=2, max_split=16, block_m=32),
    "p_s3_2cta_bq32": dict(presplit_weights=True, num_stages=3, ctas_per_sm=2, max_split=16, block_q=32, block_kv=32),
    "p_s3_2cta_chunked": dict(presplit_weights=True, num_stages=3, ctas_per_sm=2, max_split=16, ln_stats="chunked"),
    "p_s3_2cta_blocked": dict(presplit_weights=True, num_stages=3, ctas_per_sm=2, max_split=16, tile_order="blocked"),
    "p_s3_3cta_bm32": dict(presplit_weights=True, num_stages=3, ctas_per_sm=3, max_split=16, maxnreg=168, block_m=32),
    "tiled": dict(gemm_loop="tiled", presplit_rows=3, attn_fill=False),  # session 2's defaults (f0e62a3)
    "nofill": dict(attn_fill=False),
    "bnw128": dict(block_n_wide=128),
    "nest": dict(gemm_loop="nested"),
    "nest_n64": dict(gemm_loop="nested", block_n=64, block_n_wide=64),
    "nest_n64w128": dict(gemm_loop="nested", block_n=64),
    "nest_n64_s4_ast1": dict(gemm_loop="nested", block_n=64, block_n_wide=64, num_stages=4, attn_stages=1),
    "nest_n64_ast1": dict(gemm_loop="nested", block_n=64, block_n_wide=64, attn_stages=1),
    "ast1": dict(attn_stages=1),
    "untuned": dict(),  # the yaml defaults without autotuning (the "default" row tunes)
    "lnb32": dict(block_m_ln=32),
    "bar_atomic": dict(barrier="flags_atomic"),
    "bar_counter": dict(barrier="counter"),
    "bm128_w8": dict(block_m=128, num_warps=8, ctas_per_sm=1),
    "ast2": dict(attn_stages=2),
    "bk64_n64_s2": dict(block_k=64, block_n=64, block_n_wide=64, num_stages=2, attn_stages=1),
    "bk64_n64_s3": dict(block_k=64, block_n=64, block_n_wide=64, num_stages=3, attn_stages=1),
    "bk64_n64_s2_ast2": dict(block_k=64, block_n=64, block_n_wide=64, num_stages=2, attn_stages=2),
    "gp": dict(gelu="poly"),
    "gp_bnw128": dict(gelu="poly", block_n_wide=128),
    "gp_bq64": dict(gelu="poly", attn_fill=False),
    "gp_bn64": dict(gelu="poly", block_n=64),
    "sk": dict(stream_k=True),
    "ska": dict(stream_k="auto"),
    "ska_as": dict(stream_k="auto", attn_presplit=True),
    "ska_as_bn128": dict(stream_k="auto", attn_presplit=True, block_n=128),
    "as": dict(attn_presplit=True),
    "sk_as": dict(stream_k=True, attn_presplit=True),
    "sk_as_bn128": dict(stream_k=True, attn_presplit=True, block_n=128),
    "sk_as_bkv128": dict(stream_k=True, attn_presplit=True, block_kv=128),
    "sk_as_bn128_bkv128": dict(stream_k=True, attn_presplit=True, block_n=128, block_kv=128),
    "sk_as_bk64_s2": dict(stream_k=True, attn_presplit=True, block_k=64, num_stages=2),
    "sk_as_bn128_bk64_s2": dict(stream_k=True, attn_presplit=True, block_n=128, block_k=64, num_stages=2),
    "flat": dict(gemm_loop="flat"),
    "flat_bn128": dict(gemm_loop="flat", block_n=128),
    "flat_4cta": dict(gemm_loop="flat", ctas_per_sm=4, max_split=16),
    "flat_s4": dict(gemm_loop="flat", num_stages=4),
    "flat_hl": dict(gemm_loop="flat", presplit_rows=2),
    "flat_hl_bm128": dict(gemm_loop="flat", presplit_rows=2, block_m=128),
    "flat_hl_bnw128": dict(gemm_loop="flat", presplit_rows=2, block_n_wide=128),
    "flat_hl_bm128_bnw128_w8": dict(gemm_loop="flat", presplit_rows=2, block_m=128, block_n_wide=128, num_warps=8),
    "flat_hl_s4": dict(gemm_loop="flat", presplit_rows=2, num_stages=4),
    "flat_hl_g2": dict(gemm_loop="flat", presplit_rows=2, seqs_per_program=2),
    "flat_hl_bk64": dict(gemm_loop="flat", presplit_rows=2, block_k=64),
    "flat_hl_bnw128_bk64": dict(gemm_loop="flat", presplit_rows=2, block_n_wide=128, block_k=64),
    "flat_hl_bn128": dict(gemm_loop="flat", presplit_rows=2, block_n=128),
    "flat_hl_bn128_bk64": dict(gemm_loop="flat", presplit_rows=2, block_n=128, block_k=64),
    "flat_hl_bnw128_bk64_s2": dict(gemm_loop="flat", presplit_rows=2, block_n_wide=128, block_k=64, num_stages=2),
    "flat_hl_auto": dict(gemm_loop="flat", presplit_rows=2, block_n_wide="auto"),
    "flat_hl_auto_fill": dict(gemm_loop="flat", presplit_rows=2, block_n_wide="auto", attn_fill=True),
    "flat_hl_bnw128_fill": dict(gemm_loop="flat", presplit_rows=2, block_n_wide=128, attn_fill=True),
    "flat_hl_bnw128_g2": dict(gemm_loop="flat", presplit_rows=2, block_n_wide=128, seqs_per_program=2),
    "flat_bk64": dict(gemm_loop="flat", block_k=64),
    "flat_bm128": dict(gemm_loop="flat", block_m=128),
    "flat_3cta": dict(gemm_loop="flat", ctas_per_sm=3, maxnreg=168),
    "bq32": dict(block_q=32, block_kv=32),  # on today's defaults (presplit, s3, 2 CTAs/SM, blocked)
    "bn128": dict(block_n=128),             # (today's defaults, as bq32)
    "bm128": dict(block_m=128),
    "3cta": dict(ctas_per_sm=3, maxnreg=168),
    "nofit": dict(fit_smem=False),
    "s3": dict(num_stages=3),
    "presplit_s3": dict(presplit_weights=True, num_stages=3),
    "cb_s3": dict(_CB, num_stages=3),
    "cbp_s3": dict(_CBP, num_stages=3),
    "cbp_s3_2cta": dict(_CBP, num_stages=3, ctas_per_sm=2, max_split=16),
    "cb_s3_bk64": dict(_CB, num_stages=3, block_k=64),
    "s4": dict(num_stages=4),
    "cb_s3_2cta": dict(_CB, num_stages=3, ctas_per_sm=2, max_split=16),
    "chunked_blocked": dict(_CB),
    "presplit": dict(presplit_weights=True),
    "tf32x3": dict(prec_qkv="tf32x3", prec_attn="tf32x3", prec_o="tf32x3", prec_ffn1="tf32x3", prec_ffn2="tf32x3"),
    "w8": dict(num_warps=8),
    # session 6: groups of several sequences (fewer weight re-reads per row), attention tile shapes
    "g2": dict(seqs_per_program=2),
    "g4": dict(seqs_per_program=4),
    "g2r1": dict(seqs_per_program=2, split=1),
    "bq32k64": dict(block_q=32),
    "bq16": dict(block_q=16),
    "bkv128": dict(block_kv=128),
    "bkv32": dict(block_kv=32),
    "bkv128_ast1": dict(block_kv=128, attn_stages=1),
    "ff": dict(ffn_fused=True),
    "ff_n128": dict(ffn_fused=True, block_n2=128),
    "ff_h64": dict(ffn_fused=True, block_h=64),
    "ff_h64_n128": dict(ffn_fused=True, block_h=64, block_n2=128),
    "ff_nest": dict(ffn_fused=True, gemm_loop="nested", block_n=64, block_n_wide=64),
    "ff_ast1": dict(ffn_fused=True, attn_stages=1),
    "ao": dict(attn_oproj=True),
    "ao_ast1": dict(attn_oproj=True, attn_stages=1),
    "ao_ff": dict(attn_oproj=True, ffn_fused=True),
    "ao_ff_ast1": dict(attn_oproj=True, ffn_fused=True, attn_stages=1),
    "ao_ff_nest": dict(_AFN),
    "ao_nest": dict(attn_oproj=True, gemm_loop="nested", block_n=64, block_n_wide=64),
    "ao_nest128": dict(attn_oproj=True, gemm_loop="nested", block_n=64),
    "g2_ao_ff_ast1": dict(seqs_per_program=2, attn_oproj=True, ffn_fused=True, attn_stages=1),
    "g2_ao_ff_nest": dict(_AFN, seqs_per_program=2),
    "g4_ao_ff_ast1": dict(seqs_per_program=4, attn_oproj=True, ffn_fused=True, attn_stages=1),
    "g4_ao_ff_nest": dict(_AFN, seqs_per_program=4),
    # ln_fold (session 6; GPU-measured in session 7: slower everywhere): the fusions without LayerNorm phases
    "lnf_ast1": dict(attn_oproj=True, ffn_fused=True, ln_fold=True, attn_stages=1),
    "lnf_nest": dict(_AFN, ln_fold=True),
    "g2_lnf_nest": dict(_AFN, seqs_per_program=2, ln_fold=True),
    "g4_lnf_nest": dict(_AFN, seqs_per_program=4, ln_fold=True),
    # session 7: groups of 8 sequences (case 6: 32 groups of 128 rows)
    "g8_ao_ff_nest": dict(_AFN, seqs_per_program=8),
    "g8_ao_ff_ast1": dict(seqs_per_program=8, attn_oproj=True, ffn_fused=True, attn_stages=1),
    "g4_ao_ff_nest_ast1": dict(_AFN, seqs_per_program=4, attn_stages=1),
    # 32-wide QKV tiles: case 6's 6 QKV tiles of 64 over 4 programs become 12 of 32 (3 each)
    "g4_ao_ff_nest_w32": dict(seqs_per_program=4, attn_oproj=True, ffn_fused=True, gemm_loop="nested", block_n=64,
                              block_n_wide=32),
    "g2_ao_ff_nest_w32": dict(seqs_per_program=2, attn_oproj=True, ffn_fused=True, gemm_loop="nested", block_n=64,
                              block_n_wide=32),
    "g4_ao_ff_nest_n32": dict(seqs_per_program=4, attn_oproj=True, ffn_fused=True, gemm_loop="nested", block_n=32,
                              block_n_wide=32),
    # case 7 (6 heads, 8 programs): 64-row attention tiles (6 items, one round) instead of 32-row ones (12 items)
    "nest_n64_nofill": dict(_NEST64, attn_fill=False),
    "nest_n64_nofill_ast1": dict(_NEST64, attn_fill=False, attn_stages=1),
    "nest_n64_bkv32": dict(_NEST64, block_kv=32),
    # session 8: 128-row GEMM tiles on 4 warps (half the weight re-reads per MMA; 2 stages so that 2 programs fit
    # an SM), on one sequence (S >= 128) or on groups of 2 / 4; "s2" is the same depth at 64 rows
    "s2": dict(num_stages=2),
    "bm128_s2": dict(block_m=128, num_stages=2),
    "g2_bm128_s2": dict(seqs_per_program=2, block_m=128, num_stages=2),
    "g4_bm128_s2": dict(seqs_per_program=4, block_m=128, num_stages=2),
    "ao_ff_bm128_s2": dict(attn_oproj=True, ffn_fused=True, block_m=128, num_stages=2, attn_stages=1),
    # session 8: finer pipeline steps in the same shared memory (K steps of 16, 4-5 stages, attention 1 stage:
    # 82-94 KiB, two programs per SM); "ast1" is the control at K steps of 32, 3 stages
    "ast1": dict(attn_stages=1),
    "bk16_s4_ast1": dict(block_k=16, num_stages=4, attn_stages=1),
    "bk16_s5_ast1": dict(block_k=16, num_stages=5, attn_stages=1),
    "nest_n64_bk16_s5_ast1": dict(_NEST64, block_k=16, num_stages=5, attn_stages=1),
    # session 9: ln_local=qkv (D <= 128): no LN1 phase, the QKV programs normalise their own row blocks. The
    # ln_local=all entries (lnl_nest*, g2/g4_lnl_nest*, ao_lnl_*: no LN2 phase either) ran at f218ae9-9b4f028; that
    # form was slower everywhere and is removed (last in ff2cf8a; docs/seqres.md session 9)
    "lnq_nest": dict(_AFN, ln_local="qkv"),
    "g2_lnq_nest": dict(_AFN, ln_local="qkv", seqs_per_program=2),
    "g4_lnq_nest": dict(_AFN, ln_local="qkv", seqs_per_program=4),
    # (the lnq_nest entries above ran the flat loop's single accumulator in the local QKV phase until 9b4f028)
    "lnq_flat64": dict(attn_oproj=True, ffn_fused=True, ln_local="qkv", block_n=64, block_n_wide=64),
    "g2_lnq_flat64": dict(attn_oproj=True, ffn_fused=True, ln_local="qkv", block_n=64, block_n_wide=64,
                          seqs_per_program=2),
    # session 9: fewer programs per group where the tiles do not divide over today's R (max_split caps R):
    # case 7 (QKV 18 tiles over 8 -> 6), case 11 (24 over 16 -> 8), cases 5/6 (6 over 4 -> 2 or 3)
    "nest_n64_r6": dict(_NEST64, max_split=6),
    "ao_ff_nest_r8": dict(_AFN, max_split=8),
    "lnq_nest_r8": dict(_AFN, ln_local="qkv", max_split=8),
    "g2_ao_ff_nest_r2": dict(_AFN, seqs_per_program=2, max_split=2),
    "g2_ao_ff_nest_r3": dict(_AFN, seqs_per_program=2, max_split=3),
    "g4_ao_ff_nest_r2": dict(_AFN, seqs_per_program=4, max_split=2),
    "g4_ao_ff_nest_r3": dict(_AFN, seqs_per_program=4, max_split=3),
    # session 9: one LayerNorm block of 32 rows per program (one L2 round trip instead of two) in the LN2 phase
    "lnq_nest_lnb32": dict(_AFN, ln_local="qkv", block_m_ln=32),
    "ao_ff_nest_lnb32": dict(_AFN, block_m_ln=32),
    "g2_ao_ff_nest_lnb32": dict(_AFN, seqs_per_program=2, block_m_ln=32),
    "g4_ao_ff_nest_lnb32": dict(_AFN, seqs_per_program=4, block_m_ln=32),
    "g2_lnq_nest_lnb32": dict(_AFN, ln_local="qkv", seqs_per_program=2, block_m_ln=32),
    # session 9: the attention tiles of the fused configuration on cases 10 and 11 (32-row query tiles today)
    "ao_ff_nest_bkv128": dict(_AFN, block_kv=128),
    "ao_ff_nest_bkv128_ast1": dict(_AFN, block_kv=128, attn_stages=1),
    "ao_ff_nest_nofill": dict(_AFN, attn_fill=False),
    "ao_ff_nest_bkv32": dict(_AFN, block_kv=32),
    "lnq_nest_bkv128": dict(_AFN, ln_local="qkv", block_kv=128),
    "lnq_nest_nofill": dict(_AFN, ln_local="qkv", attn_fill=False),
    # session 10: causal attention with 2+ rounds of query tiles per program, so that the mirrored odd rounds even
    # out the key blocks (case 10: 4 tiles of 64 rows over 4 programs carry 1 or 2 key blocks; case 7: 12 of 32 over 8)
    "lnq_nest_bq32": dict(_AFN, ln_local="qkv", block_q=32),
    "lnq_nest_bq32_kv32": dict(_AFN, ln_local="qkv", block_q=32, block_kv=32),
    "lnq_nest_bq32_ast1": dict(_AFN, ln_local="qkv", block_q=32, attn_stages=1),
    "lnq_nest_bq16": dict(_AFN, ln_local="qkv", block_q=16),
    "nest_n64_bq16": dict(_NEST64, block_q=16),
    "nest_n64_bq16_kv32": dict(_NEST64, block_q=16, block_kv=32),
    # session 10: 128-row tiles with K steps of 16 (a 128x128 tile's stage is 16 KiB, so 4-5 stages fit two programs
    # per SM): a third fewer L2 bytes per MMA than 64x128x32, the same 6 wgmma per step (session 8 tried 128-row tiles
    # only with 2 stages of 32, and K steps of 16 only on 64-row tiles)
    "bm128_bk16_s3_ast1": dict(block_m=128, block_k=16, num_stages=3, attn_stages=1),
    "bm128_bk16_s4_ast1": dict(block_m=128, block_k=16, num_stages=4, attn_stages=1),
    "bm128_bk16_s5_ast1": dict(block_m=128, block_k=16, num_stages=5, attn_stages=1),
    "g2_bm128_bk16_s4_ast1": dict(block_m=128, block_k=16, num_stages=4, attn_stages=1, seqs_per_program=2),
    # session 10: attn_item_stages (case 9's attention loop over tiles unpipelined; entries ais1, ast1_ais3,
    # nest_n64_ais1, ...) and qkv_loop (128-wide QKV tiles on one accumulator; entries *_qf128) were measured at
    # 008c1a4 and 766e96a and removed with their parameters (docs/seqres.md, session 10)
    "tf32_speed_only": dict(fast_layers=-1),  # all GEMMs tf32: expected to fail the gate
    # each case's published choice: the tune candidate in the committed report's timing JSON (published_choice).
    # Measured against it and removed (docs/seqres.md, session 11): pub_bst / pub_brl (barrier: flags_st /
    # flags_relaxed, the st.release barriers, at 2ec62e7), pub_ds2, pub_ds2_nofill, ao_nest_ds2 (attn_dsplit, at
    # 8bc70c4)
    "pub": dict(published=True),
    "pub_bkv128": dict(published=True, block_kv=128),  # one 128-key block per attention tile (S >= 128)
    "pub_bkv128_ast1": dict(published=True, block_kv=128, attn_stages=1),
    "pub_bt0": dict(published=True, barrier="counter_t0"),  # the barrier published and polled by thread 0 (session 12)
    "pub_bcnt": dict(published=True, barrier="counter"),    # its control: the same counter, every warp polling
    # attn_pack (session 12): consecutive sequences of a group in one attention tile (cases 5 and 6: 32- and 16-row
    # sequences); nofill: 64-row tiles on wgmma with some programs idle, rather than halved 32-row tiles
    "pub_pk2": dict(published=True, attn_pack=2),
    "pub_pk4": dict(published=True, attn_pack=4),
    "pub_pk2_nofill": dict(published=True, attn_pack=2, attn_fill=False),
    "pub_pk4_nofill": dict(published=True, attn_pack=4, attn_fill=False),
    # case 7's 64-row groups have 4 LayerNorm row blocks of 16 for 8 programs; blocks of 8 give every program one
    "pub_lnb8": dict(published=True, block_m_ln=8),
    # session 13: acc_reset: select (the flat loop's accumulator zeroed by a select at a tile's first K step, so ptxas
    # stops serializing every wgmma of the kernel), and the flat loop in that form on the cases whose published choice
    # is the nested loop (measured with select as the default, where these entries were pub, pub_flat, pub_flat_auto)
    "pub_ars": dict(published=True, acc_reset="select"),
    "pub_flat_ars": dict(published=True, gemm_loop="flat", acc_reset="select"),
    "pub_flat_auto_ars": dict(published=True, gemm_loop="flat", block_n="auto", block_n_wide="auto", acc_reset="select"),
    # session 14: one program of 8 warps per SM (two warpgroups share each GEMM tile: half the epilogue per thread, and
    # ptxas keeps the wgmma asynchronous) with the shared memory of the whole SM for deeper GEMM pipelines
    "w8": dict(num_warps=8, ctas_per_sm=1),
    "w8_s4": dict(num_warps=8, ctas_per_sm=1, num_stages=4, attn_stages=3),
    "w8_s5": dict(num_warps=8, ctas_per_sm=1, num_stages=5, attn_stages=3),
    "w8_bm128_s4": dict(num_warps=8, ctas_per_sm=1, block_m=128, num_stages=4, attn_stages=3),
    "pub_w8": dict(published=True, num_warps=8, ctas_per_sm=1),
    "pub_w8_s4": dict(published=True, num_warps=8, ctas_per_sm=1, num_stages=4, attn_stages=3),
    "pub_w8_s5": dict(published=True, num_warps=8, ctas_per_sm=1, num_stages=5, attn_stages=3),
    # session 14: epilogue_io (GEMM / attention outputs stored, loaded and added in the MMA layout, no layout conversion
    # through shared memory): pub_mio (everything), pub_mio_s4 (+ 4 stages), pub_red (the atomics only), measured at
    # 48a6054 / 3fe4dfc and removed with the option (docs/seqres.md, session 14); pub_s4: 4 stages without it
    "pub_s4": dict(published=True, num_stages=4, attn_stages=3),
    # session 15: the accumulator reset as wgmma's zero-accumulator predicate (acc_reset: flag) and the waits between a
    # step's chained dots relaxed (wgmma_chain: async), both compile-time edits of Triton's sm_90 pipeline
    "pub_arf": dict(published=True, acc_reset="flag", wgmma_chain="wait"),
    "pub_arf_wa": dict(published=True, acc_reset="flag", wgmma_chain="async"),
    "pub_wa": dict(published=True, acc_reset="branch", wgmma_chain="async"),
    "pub_arb": dict(published=True, acc_reset="branch", wgmma_chain="wait"),  # the unedited kernel (before session 15)
    "pub_ov": dict(published=True, acc_reset="flag", wgmma_chain="overlap"),  # a step's dots in flight into the next
    "pub_ftr": dict(published=True, flat_trips="exact"),  # no padded steps in the flat loop's uneven phases
    "pub_flat_auto_ftr": dict(published=True, gemm_loop="flat", block_n="auto", block_n_wide="auto", flat_trips="exact"),
    "pub_flat_auto": dict(published=True, gemm_loop="flat", block_n="auto", block_n_wide="auto"),
    # session 16: the copy phase fused with layer 0's LN1 split (copy_phase: fused, the default since) against the
    # separate copy phase and its barrier; ln_local on the published choices of the D = 128 cases; 32-row query tiles
    # on case 10 (its 4 causal 64-row tiles over 4 programs: 1 or 2 key blocks each)
    "pub_cps": dict(published=True, copy_phase="separate"),
    "pub_lnl": dict(published=True, ln_local="qkv"),
    "pub_bq32": dict(published=True, block_q=32),
    # session 16: 32-row LayerNorm blocks (one per program on case 1); 64-wide QKV tiles on cases 5, 6, 11 (the control
    # of the QKV stream-K measurement, docs/seqres.md session 16: the option was removed after it)
    "pub_bnw64": dict(published=True, block_n_wide=64),
    "pub_lnb32": dict(published=True, block_m_ln=32),
    # session 16: the attention tiles' key blocks in two halves on two programs (case 11: 8 tiles, 16 programs)
    "pub_kvs": dict(published=True, attn_kv_split=True),
    "pub_kvs_bkv128": dict(published=True, attn_kv_split=True, block_kv=128),
    # session 16: one 8-warp program per SM on 128-row tiles again, now that the wgmma chains are asynchronous (session
    # 14 measured it with every dot waited for): 128x128 GEMM tiles (half the weight bytes per MMA), 128-row attention
    # tiles (a 64-row half per warpgroup), 3-4 stages; case 9 on groups of 2 sequences (128 rows)
    "w8_bm128_s4_q128": dict(num_warps=8, ctas_per_sm=1, block_m=128, num_stages=4, attn_stages=3, block_q=128),
    "w8_bm128_s3_q128": dict(num_warps=8, ctas_per_sm=1, block_m=128, num_stages=3, block_q=128),
    "w8_bm128_s4_q128_ov": dict(num_warps=8, ctas_per_sm=1, block_m=128, num_stages=4, attn_stages=3, block_q=128,
                                wgmma_chain="overlap"),
    "w8_g2_bm128_s4": dict(num_warps=8, ctas_per_sm=1, block_m=128, num_stages=4, attn_stages=3, seqs_per_program=2,
                           attn_pack=2, block_q=128),
    "w8_g2_bm128_s4_ov": dict(num_warps=8, ctas_per_sm=1, block_m=128, num_stages=4, attn_stages=3,
                              seqs_per_program=2, attn_pack=2, block_q=128, wgmma_chain="overlap"),
    "arf_wa": dict(acc_reset="flag", wgmma_chain="async"),  # the defaults (the flat loop) in that form
    "pub_ao": dict(published=True, attn_oproj=True),  # the fusions again, now that the chains are asynchronous
    "pub_ff": dict(published=True, ffn_fused=True),
    "pub_ao_ff": dict(published=True, attn_oproj=True, ffn_fused=True),
    "pub_flat_arf_wa": dict(published=True, gemm_loop="flat", acc_reset="flag", wgmma_chain="async"),
    "pub_flat_auto_arf_wa": dict(published=True, gemm_loop="flat", block_n="auto", block_n_wide="auto",
                                 acc_reset="flag", wgmma_chain="async"),
    # session 17: pub_g3 / g3 (gelu: log2poly, then a degree-6 fit, against the published choice with gelu: poly, at
    # 8e4cac2) and pub_g5 (degree 5 against degree 6, at 7cafa7e); log2poly (degree 5) is the default since, and its
    # control is the published choice with the Abramowitz-Stegun erf:
    "pub_gpoly": dict(published=True, gelu="poly"),
    # session 17: attn_oproj's projection as one D-wide block, its weights loaded after the key loop (late) or before it
    # (early), rather than a loop of block_n2-wide blocks each loading its weights after the attention
    "pub_aol": dict(published=True, ao_weights="late"),
    "pub_aoe": dict(published=True, ao_weights="early"),
    # session 18: wide_split (case 7's QKV/FFN1 columns in two tile widths, at 7bf7794) and nested_phases (the nested
    # loop in some GEMM phases only: c7_nq, c7_nqo, c7_nqo64, pub_nq, pub_nf2, at eb5d0a1) measured slower and removed,
    # as were pub_bk64 / pub_bk64s2 (block_k 64 with 3 or 2 stages: 1.1-2.3x slower; docs/seqres.md, session 18). The
    # attention as one loop over (tile, key block) pairs, pipelined 2 deep (3 stages do not fit two programs per SM on
    # case 1), and case 7's choice with 64-row attention tiles (6 over 8 programs, one round) instead of 12 of 32 rows:
    "pub_afl2": dict(published=True, attn_loop="flat", attn_stages=2),
    "pub_nofill": dict(published=True, attn_fill=False),
    # case 7's choice (64-row attention tiles since a3e207e) on 6 programs per group: its QKV tiles (18) and attention
    # tiles (6) then divide evenly (on 8, two programs idle in both phases); LayerNorm blocks of 8 or 16 rows. Measured
    # at 1531a41: 8.5-22% slower (the other phases lose two programs; docs/seqres.md, session 18)
    # case 9's published choice runs 32-row attention tiles (fit_smem halves them: 3 attention stages of 64-row tiles
    # do not fit two programs per SM); pub_afl2 keeps 64-row tiles with 2 stages: the same in the nested attention loop
    # (measured at 6ce8212: 1.5-2.7% faster; since 53b581c fit_smem takes the attention to 2 stages first, so pub does)
    "pub_ast2": dict(published=True, attn_stages=2),
    # session 19: FFN2 on fp16 hi/lo A parts and W2 rounded to fp16 once (two products, 2-byte weights)
    "pub_f2h": dict(published=True, ffn2_scheme="f16_w1"),
    "pub_f2b": dict(published=True, ffn2_scheme="bf16x3"),  # the control since f16_w1 became the default (f77464e)
    "pub_f1h": dict(published=True, ffn1_scheme="f16_w1", ffn2_scheme="bf16x3"),  # the two products on FFN1 instead
    # session 20: the two products on both FFN GEMMs (emulated: 0.79-0.93 of the tolerance on cases 1, 5, 7, 9, 11)
    "pub_f12h": dict(published=True, ffn1_scheme="f16_w1", ffn2_scheme="f16_w1"),
    # (session 19: l2_prefetch all / next / layer as pub_pfa / pub_pfn / pub_pfl, measured at 22bbdfc and removed: the
    # layers' parameters asked of L2 with cp.async.bulk.prefetch.L2; 0.5-8% slower, and ms_warm_l2 shows cold weights
    # cost nothing)
    "pub_r6": dict(published=True, max_split=6),
    "pub_r6_lnb16": dict(published=True, max_split=6, block_m_ln=16),
    "pub_r6_bnw64": dict(published=True, max_split=6, block_n_wide=64),  # (FFN1 in 64-wide tiles again: 4 per program)
    # session 12: pub_qs (qkv_split: auto, the QKV columns split so every program gets the same) measured at 32d608f and
    # removed with its parameter (docs/seqres.md, session 12)
}

PUBLISHED_RUN = Path(__file__).resolve().parents[2] / "docs" / "results" / "h200" / "raw" / "timing" / "h200"


def fastest_gated_peer_ms(number: int) -> float:
    """The fastest gated peer of case ``number`` in the published peer run (docs/results/h200/raw): the lowest timing
    median among the registry's gated peers whose correctness JSON passed (nan when none)."""
    from kernels import list_variants
    best = float("nan")
    for v in list_variants("peer"):
        if not get_variant(v).gated_peer:
            continue
        t, k = (PUBLISHED_RUN.parents[1] / stage / "h200" / f"case{number:02d}" / f"{v}.json"
                for stage in ("timing", "correctness"))
        if not (t.is_file() and k.is_file()):
            continue
        t, k = json.loads(t.read_text()), json.loads(k.read_text())
        if t.get("status") == "ok" and k.get("passed") and not t["median_ms"] >= best:
            best = t["median_ms"]
    return best


def published_choice(case) -> dict:
    """The tune candidate the published timing job of ``case`` chose (``prepare_info.tune.chosen_params`` in
    docs/results/h200/raw/timing/h200/caseNN/auto.json; {} when it kept the defaults)."""
    f = PUBLISHED_RUN / f"case{case.number:02d}" / "auto.json"
    if not f.is_file():
        raise ValueError(f"check_gpu: no published timing for {case.name} ({f}); the 'pub' entries need one")
    tune = json.loads(f.read_text()).get("prepare_info", {}).get("tune", {})
    return dict(tune.get("chosen_params", {}))


def _resolve(over: dict, case, base: dict) -> dict:
    """The full parameter set of a SWEEP entry for ``case``: the yaml defaults without autotuning (an entry
    is one configuration) unless the entry names ``tune``, then its overrides."""
    if over.get("fast_layers") == -1:  # every layer (and attention) in plain tf32
        over = dict(over, fast_layers=case.L, prec_attn="tf32")
    if over.get("published"):
        over = {**published_choice(case), **{k: v for k, v in over.items() if k != "published"}}
    return {**base, "tune": [], **over}


def _compile_job(n: int, params: dict) -> str:
    """Worker of --precompile: build the kernel of (case n, params) as check_one will; '' or the error."""
    try:
        case = load_case(n)
        w = make_weights(case, device="cuda")
        prepare_one(case, w, **params)  # compiles on CUDA; spin_limit is a runtime argument: one binary
        return ""
    except Exception as e:  # reported by the parent; check_one records it again
        return f"case {n} {params}: {e!r}"


def check_one(case, w, params: dict, spin_limit: int = 200_000, trace: bool = False) -> dict:
    """Gate at every scale x seed (bounded spins: a broken barrier reports instead of hanging), then time."""
    v = get_variant("seqres")
    rec = {"params": params}
    t0 = time.time()
    p = v.prepare(case, w, **dict(params, spin_limit=spin_limit if params.get("split", 1) != 1 else 0))
    rec["info"] = {k: v_ for k, v_ in p.info.items() if k != "precisions"}
    if "tune" in p.info:  # gate, time and trace the candidate prepare chose (a second prepare could choose another)
        params = dict(params, **p.info["tune"]["chosen_params"], tune=[])
        rec["params_effective"] = params
    x = make_input(case, 1.0, 0, device="cuda")
    k = launch(p, x, torch.empty_like(x))
    torch.cuda.synchronize()
    rec["compile_s"] = round(time.time() - t0, 2)
    rec["kernel"] = dict(n_regs=k.n_regs, n_spills=k.n_spills, shared=k.metadata.shared,
                         num_warps=k.metadata.num_warps)
    worst, passed, rows = 0.0, True, []
    for seed in SEEDS:
        for scale in SCALES:
            x = make_input(case, scale, seed, device="cuda")
            y = v.run(p, x)
            g = gate(y, reference_forward(case, w, x))
            rows.append(dict(scale=scale, seed=seed, passed=g.passed, max_abs=g.max_abs, max_rel=g.max_rel,
                             max_over_tol=g.max_over_tol))
            passed &= g.passed
            worst = max(worst, g.max_over_tol)
    rec.update(gate_passed=passed, worst_over_tol=worst, gate=rows)
    p = v.prepare(case, w, **params)  # timed with unbounded spins (no host sync)
    x = make_input(case, 1.0, 0, device="cuda")
    rec["ms"] = median_ms(lambda: v.run(p, x))
    # the same calls without the L2 flush (weights left in L2 by the previous call): what cold weights cost the
    # flushed timing above
    rec["ms_warm_l2"] = median_ms(lambda: v.run(p, x), flush_bytes=0)
    host = []
    for _ in range(50):  # host time of one run() call (enqueue only; the GPU drains between calls)
        torch.cuda.synchronize()
        t = time.perf_counter()
        v.run(p, x)
        host.append((time.perf_counter() - t) * 1e6)
    torch.cuda.synchronize()
    rec["host_us"] = sorted(host)[len(host) // 2]
    g = gate(v.run(p, x), reference_forward(case, w, x))
    rec["gate_after_timing"] = g.passed
    if trace:  # where the time goes: per-phase work and barrier wait from the programs' timestamps
        from kernels.seqres.host import phase_profile
        p = v.prepare(case, w, **dict(params, trace=True))
        profs = []
        for _ in range(7):
            v.run(p, x)
            torch.cuda.synchronize()
            profs.append(phase_profile(p))
        rec["phase_profile"] = sorted(profs, key=lambda d: d["kernel_us"])[len(profs) // 2]  # median launch
    return rec


def profile_line(pp: dict) -> str:
    """One line of a phase profile: kernel µs, then work/wait µs per phase kind."""
    parts = [f"{k} {pp['work_us'][k]:.0f}/{pp['wait_us'].get(k, 0.0):.0f}" for k in pp["work_us"]]
    return f"kernel {pp['kernel_us']:.0f}us skew {pp['start_skew_us']:.1f} | " + " ".join(parts)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="outputs/seqres_check")
    ap.add_argument("--cases", nargs="+", type=int, default=list(CASES))
    ap.add_argument("--sweep", action="store_true")
    ap.add_argument("--configs", nargs="+", default=None, help=f"sweep only these SWEEP entries: {list(SWEEP)}")
    ap.add_argument("--budget-s", type=float, default=200.0)
    ap.add_argument("--precompile", type=int, default=0, metavar="J",
                    help="first compile every (case, config) in J processes (fills Triton's cache; 0 = off)")
    ap.add_argument("--precompile-only", action="store_true", help="stop after --precompile")
    ap.add_argument("--skip-default", action="store_true",
                    help="gate and time only the --configs entries, not the tuned defaults first (no autotuning)")
    ap.add_argument("--trace", action="store_true",
                    help="also run each config with trace=true and record its per-phase profile (work/wait µs)")
    a = ap.parse_args(argv)
    names = [n for n in (a.configs or list(SWEEP)) if a.sweep]
    unknown = [n for n in names if n not in SWEEP]
    if unknown:
        raise SystemExit(f"check_gpu: unknown --configs {unknown}; known: {list(SWEEP)}")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    t_start = time.time()
    base = dict(DEFAULTS)  # config/variant/seqres.yaml, as prepare reads it
    results = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
               "defaults": base, "cases": {}}

    def save():
        (out / "seqres_check.json").write_text(json.dumps(results, indent=1, default=str))

    if a.precompile > 0:
        jobs = [(n, dict(base)) for n in a.cases if not a.skip_default] + [(n, _resolve(SWEEP[nm], load_case(n), base))
                                                      for nm in names for n in a.cases]
        if a.trace:
            jobs += [(n, dict(pr, trace=True)) for n, pr in jobs]
        jobs = [(n, full) for n, pr in jobs for _, full in tune_candidates(pr)]
        t0 = time.time()
        ctx = multiprocessing.get_context("spawn")
        with ctx.Pool(a.precompile) as pool:
            errs = [e for e in pool.starmap(_compile_job, jobs) if e]
        print(f"precompiled {len(jobs)} kernels in {time.time() - t0:.0f}s ({len(errs)} errors)", flush=True)
        for e in errs:
            print("  precompile error:", e[:300], flush=True)
    if a.precompile_only:
        return
    prepared = {}
    for n in a.cases:
        case = load_case(n)
        w = make_weights(case, device="cuda")
        x = make_input(case, 1.0, 0, device="cuda")
        sd = get_variant("eager_sdpa")
        ps = sd.prepare(case, w)
        sdpa_ms = median_ms(lambda: sd.run(ps, x))
        results["cases"][n] = {"eager_sdpa_ms": sdpa_ms, "configs": {}}
        prepared[n] = (case, w)
        if a.skip_default:
            continue
        try:
            rec = check_one(case, w, base, trace=a.trace)
        except Exception as e:  # record and go on: one case must not hide the others
            rec = {"error": repr(e)[:2000]}
        results["cases"][n]["configs"]["default"] = rec
        print(n, "default", {k: rec.get(k) for k in ("gate_passed", "worst_over_tol", "ms", "host_us", "compile_s", "kernel", "info",
                                                    "error")}, flush=True)
        save()
    if a.sweep:
        for name in names:
            for n in a.cases:
                if time.time() - t_start > a.budget_s:
                    break
                case, w = prepared[n]
                try:
                    rec = check_one(case, w, _resolve(SWEEP[name], case, base), trace=a.trace)
                except Exception as e:
                    rec = {"error": repr(e)[:2000]}
                results["cases"][n]["configs"][name] = rec
                print(n, name, {k: rec.get(k) for k in ("gate_passed", "worst_over_tol", "ms", "ms_warm_l2", "host_us", "kernel", "info", "error")},
                      flush=True)
                save()
    lines = [f"{'case':>4} {'config':>20} {'gate':>5} {'worst/tol':>9} {'ms':>8} {'sdpa ms':>8} "
             f"{'vs sdpa':>7} {'vs peer':>7} {'regs':>4} {'spill':>5} {'warm L2':>8}"]
    best = {}
    for n, r in results["cases"].items():
        for name, rec in r["configs"].items():
            if "ms" not in rec:
                lines.append(f"{n:>4} {name:>20} ERROR {rec.get('error', '')[:80]}")
                continue
            ok = rec["gate_passed"] and rec["gate_after_timing"]
            if ok and (n not in best or rec["ms"] < best[n][1]):
                best[n] = (name, rec["ms"])
            lines.append(f"{n:>4} {name:>20} {'PASS' if ok else 'FAIL':>5} {rec['worst_over_tol']:9.3f} "
                         f"{rec['ms']:8.4f} {r['eager_sdpa_ms']:8.4f} {r['eager_sdpa_ms'] / rec['ms']:7.2f} "
                         f"{fastest_gated_peer_ms(n) / rec['ms']:7.2f} {rec['kernel']['n_regs']:>4} "
                         f"{rec['kernel']['n_spills']:>5} {rec.get('ms_warm_l2', float('nan')):8.4f}")
    for n, r in results["cases"].items():
        for name, rec in r["configs"].items():
            t = rec.get("info", {}).get("tune")
            if t:  # what prepare's autotuning chose, from which candidate times
                lines.append(f"{n:>4} {name:>20} tune: chose {t['chosen']} {t['chosen_params']} of "
                             + ", ".join(f"{i}:{ms:.4f}ms" for i, ms in enumerate(t["median_ms"])))
    for n, r in results["cases"].items():
        for name, rec in r["configs"].items():
            if "phase_profile" in rec:
                lines.append(f"{n:>4} {name:>20} {profile_line(rec['phase_profile'])}")
    if best:
        sp = [fastest_gated_peer_ms(n) / ms for n, (_, ms) in best.items()]
        lines.append("best gated per case: " + ", ".join(f"{n}:{nm} {ms:.4f}ms" for n, (nm, ms) in best.items()))
        lines.append(f"geomean speedup vs the published fastest gated peer (best gated config): "
                     f"{math.exp(sum(map(math.log, sp)) / len(sp)):.2f}x over {len(sp)} cases")
    results["table"] = lines
    save()
    (out / "seqres_check.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
