#!/usr/bin/env bash
# Create .venv and install the project with pinned dependencies, torch FIRST and explicitly
# (an unpinned torch pulls a multi-GB CUDA build on a CPU machine). Idempotent; safe to rerun.
#   TORCH_SPEC   the torch requirement (default torch==2.13.0; on a GPU cluster pick the build you want)
#   VENV         where to put the environment (default .venv)
set -euo pipefail
cd "$(dirname "$0")/../.."
VENV=${VENV:-.venv}
TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0}
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
py="$VENV/bin/python"
if ! "$py" -c "import torch" 2>/dev/null; then
  echo "[setup] installing $TORCH_SPEC"
  "$py" -m pip install -q --upgrade pip
  "$py" -m pip install -q "$TORCH_SPEC"
fi
if ! "$py" -c "import triton, hydra, snakemake, pandas, matplotlib, pytest, kernels, workflow" 2>/dev/null; then
  echo "[setup] installing pinned requirements (requirements-ci.txt) and the project"
  "$py" -m pip install -q -r requirements-ci.txt
  "$py" -m pip install -q --no-deps -e .
fi
"$py" -c "import torch, triton; print(f'[setup] ok: torch {torch.__version__}, triton {triton.__version__}, cuda={torch.cuda.is_available()}')"
