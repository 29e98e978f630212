"""How many CTAs of a compiled kernel fit on one SM (persistent kernels must check their grid is co-resident:
a program that waits for a program which never got an SM deadlocks). Used by ``kernels/seqres`` and ``kernels/dag``."""
from __future__ import annotations


def ctas_per_sm_limit(n_regs: int, shared: int, num_warps: int, regs_sm: int = 65536,
                      smem_sm: int = 228 * 1024, threads_sm: int = 2048) -> int:
    """CTAs of one kernel that fit on an SM: registers allocated per warp in 256-register units, shared
    memory plus 1 KiB reserved per CTA, threads; at most 32."""
    regs_warp = -(-n_regs * 32 // 256) * 256
    by_regs = regs_sm // max(1, regs_warp * num_warps)
    by_smem = smem_sm // (shared + 1024)
    by_thr = threads_sm // (32 * num_warps)
    return max(0, min(by_regs, by_smem, by_thr, 32))


def occupancy(kernel, num_warps: int, device) -> int:
    """Resident CTAs per SM of Triton's compiled ``kernel`` on CUDA ``device`` (``ctas_per_sm_limit`` with the
    device's register file, shared memory and thread limits)."""
    import torch
    props = torch.cuda.get_device_properties(device)
    return ctas_per_sm_limit(kernel.n_regs, kernel.metadata.shared, num_warps,
                             regs_sm=getattr(props, "regs_per_multiprocessor", 65536),
                             smem_sm=getattr(props, "shared_memory_per_multiprocessor", 228 * 1024),
                             threads_sm=getattr(props, "max_threads_per_multi_processor", 2048))
