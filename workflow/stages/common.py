"""What every stage shares: the environment record, atomic result files, progress output, device setup."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SCHEMA_VERSION = 1


def log(msg: str) -> None:
    """Progress to stderr with a wall-clock stamp (long runs must show they are alive)."""
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def write_bytes_atomic(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to a temp file beside ``path`` and rename it over: readers never see half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_json_atomic(path: str | os.PathLike, data: dict) -> Path:
    """Write JSON atomically (``write_bytes_atomic``)."""
    text = json.dumps(data, indent=1, sort_keys=False, default=_json_default) + "\n"
    return write_bytes_atomic(path, text.encode())


def _json_default(o):
    if hasattr(o, "tolist"):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    return repr(o)


def git_commit() -> str:
    """$MKH_GIT_COMMIT when set (a copied tree whose .git may be stale, e.g. a lent GPU box); else HEAD of
    the checkout (``+dirty`` when tracked files changed); "unknown" without either."""
    if os.environ.get("MKH_GIT_COMMIT"):
        return os.environ["MKH_GIT_COMMIT"]
    root = Path(__file__).resolve().parents[2]
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                              text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return head + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def _nvidia_smi(uuid: str | None, fields: str) -> list[str] | None:
    cmd = ["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader,nounits"]
    if uuid:
        cmd.insert(1, f"--id={uuid}")
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0 or not out.stdout.strip():
        return None
    return [s.strip() for s in out.stdout.strip().splitlines()[0].split(",")]


def gpu_uuid() -> str | None:
    import torch
    if not torch.cuda.is_available():
        return None
    u = getattr(torch.cuda.get_device_properties(0), "uuid", None)
    if u is None:
        return None
    s = str(u)
    return s if s.startswith("GPU-") else f"GPU-{s}"


def read_clocks() -> dict | None:
    """Current SM and memory clocks (MHz) of the GPU in use, or None where unreadable."""
    vals = _nvidia_smi(gpu_uuid(), "clocks.sm,clocks.mem,temperature.gpu,power.draw")
    if not vals:
        return None
    keys = ("sm_mhz", "mem_mhz", "temp_c", "power_w")
    out = {}
    for k, v in zip(keys, vals):
        try:
            out[k] = float(v)
        except ValueError:
            out[k] = None
    return out


def environment() -> dict:
    """Who ran this, where, with what (SPEC §6)."""
    import torch
    import triton
    env = {
        "git_commit": git_commit(),
        "hostname": socket.gethostname(),
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "triton": triton.__version__,
        "cuda": torch.version.cuda,
        "triton_interpret": os.environ.get("TRITON_INTERPRET", ""),
        "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
    }
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        env.update(gpu_name=p.name, gpu_uuid=gpu_uuid(), sm_count=p.multi_processor_count,
                   gpu_memory_bytes=p.total_memory, cudnn=torch.backends.cudnn.version())
        vals = _nvidia_smi(env["gpu_uuid"], "driver_version,clocks.max.sm,clocks.max.mem")
        if vals:
            env.update(driver=vals[0], max_sm_mhz=vals[1], max_mem_mhz=vals[2])
    else:
        env.update(gpu_name=None, cpu_count=os.cpu_count())
    return env


def resolve_device(device: str, gpu: str = "", device_names=None):
    """torch.device for a GPU type's ``device`` field, or a clear error naming the fix. ``device_names`` (the GPU
    type ``gpu``'s patterns, config/gpu/<gpu>.yaml): the CUDA device's name must match one (``check_device_name``)."""
    import torch
    if device == "cuda":
        if not torch.cuda.is_available():
            raise SystemExit("error: this GPU type needs a CUDA GPU but none is visible "
                             "(torch.cuda.is_available() is False). Run on a GPU node, or use gpu=cpu "
                             "with a smoke case (case=smoke1|smoke2|smoke3).")
        dev = torch.device("cuda", 0)
        check_device_name(gpu, device_names, torch.cuda.get_device_name(dev))
        return dev
    if device == "cpu":
        return torch.device("cpu")
    raise SystemExit(f"error: gpu.device must be 'cuda' or 'cpu', got {device!r}")


def check_device_name(gpu: str, device_names, name: str) -> None:
    """A job for GPU type ``gpu`` runs only on a device whose name matches one of the type's ``device_names``
    patterns (regex; none given: any device). Otherwise its times and tuned choices would be filed under a GPU it
    did not run on (an H100 node in an H200 partition, say): an error naming the fix, before any result is written."""
    from kernels.tuning import matches_device
    pats = list(device_names or [])
    if pats and not matches_device(pats, name):
        raise SystemExit(f"error: gpu={gpu} expects a device whose name matches {pats} (device_names in "
                         f"config/gpu/{gpu}.yaml), but this job's device is {name!r}. Run it on a node of type "
                         f"{gpu} (the partition / gres in config/gpu/{gpu}.yaml), pass the gpu= type of this "
                         f"device (gpu=local takes any GPU), or add its name to device_names if it is a {gpu}.")


def sync(device) -> None:
    import torch
    if device.type == "cuda":
        torch.cuda.synchronize()  # device-wide: also waits for work a variant hid on a side stream
