"""The lab: probes, sweeps and profiling helpers (may import kernels; nothing in kernels/ or workflow/ imports bench)."""
