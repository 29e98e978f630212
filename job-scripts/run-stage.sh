#!/usr/bin/env bash
# Runs one stage job through the Hydra job entry, without Snakemake. Called by job-scripts/*.sbatch;
# also usable directly on a machine with the GPU:
#
#   bash job-scripts/run-stage.sh <stage> <default gpu type> [case=<name> variant=<name> [gpu=<type>] [out=<path>] [overrides...]]
#
# runs `python -m workflow.run stage=<stage> gpu=<default gpu type> "$@"` from the repository root
# (under Slurm: the directory sbatch was called from, which must be the repository root). A gpu=... among
# the arguments replaces the default GPU type; every argument reaches Hydra literally (never through a
# shell), so values with spaces or shell metacharacters are safe.
set -euo pipefail

stage=${1:?usage: run-stage.sh <stage> <default gpu type> [hydra overrides...]}
default_gpu=${2:?usage: run-stage.sh <stage> <default gpu type> [hydra overrides...]}
shift 2

cd "${SLURM_SUBMIT_DIR:-$PWD}"
if [[ ! -f workflow/run.py ]]; then
    echo "error: $(pwd) is not the repository root (no workflow/run.py); submit from the root:" >&2
    echo "  cd <repo> && sbatch job-scripts/$stage.sbatch case=... variant=..." >&2
    exit 2
fi
if [[ -f .venv/bin/activate ]]; then
    # shellcheck disable=SC1091
    . .venv/bin/activate
fi
python=$(command -v python || command -v python3) || { echo "error: no python on PATH" >&2; exit 2; }

gpu_arg=("gpu=$default_gpu")
for arg in "$@"; do
    case $arg in
    stage=* | +stage=* | ++stage=*)
        echo "error: '$arg': this script runs stage=$stage; use job-scripts/<stage>.sbatch for another stage" >&2
        exit 2
        ;;
    gpu=*) gpu_arg=() ;;
    esac
done

cmd=("$python" -m workflow.run "stage=$stage" "${gpu_arg[@]}" "$@")
echo "[run-stage] job ${SLURM_JOB_ID:-none} (${SLURM_JOB_NAME:-}) on $(hostname) partition=${SLURM_JOB_PARTITION:-} CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-unset}"
echo "[run-stage] $(date -u +%FT%TZ) in $(pwd): ${cmd[*]@Q}"
exec "${cmd[@]}"
