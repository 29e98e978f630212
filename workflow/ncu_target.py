"""The process Nsight Compute profiles: ``python -m workflow.ncu_target <composed-config.yaml>``.

Started by workflow/stages/ncu.py under ``ncu --profile-from-start off``. Prepares the variant (untimed,
unprofiled), warms it up ``ncu.warmup_calls`` times (compilation and autotuning happen here), then runs
exactly one call between cudaProfilerStart and cudaProfilerStop, inside the NVTX range ``mkh_profile``.
"""
from __future__ import annotations

import sys


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m workflow.ncu_target <composed-config.yaml>", file=sys.stderr)
        return 2
    from omegaconf import OmegaConf
    cfg = OmegaConf.load(argv[0])
    import torch

    from kernels import gate, get_variant, load_case, make_input, make_weights, reference_forward
    if not torch.cuda.is_available():
        print("error: ncu_target needs a CUDA GPU", file=sys.stderr)
        return 1
    device = torch.device("cuda", 0)
    case = load_case(cfg.case.name)
    weights = make_weights(case, device=device)
    variant = get_variant(cfg.variant.impl)
    params = OmegaConf.to_container(cfg.variant.params, resolve=True) or {}
    prepared = variant.prepare(case, weights, **params)
    x = make_input(case, float(cfg.ncu.input_scale), int(cfg.timing.input_seed), device=device)
    for _ in range(int(cfg.ncu.warmup_calls)):
        variant.run(prepared, x)
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    torch.cuda.nvtx.range_push("mkh_profile")
    y = variant.run(prepared, x)
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_pop()
    torch.cuda.profiler.stop()
    ok = gate(y, reference_forward(case, weights, x), float(cfg.gate.atol), float(cfg.gate.rtol)).passed
    print(f"ncu_target: {case.name} x {cfg.variant.name}: one call profiled; output "
          f"{'passes' if ok else 'FAILS'} the gate", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
