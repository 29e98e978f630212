#!/usr/bin/env bash
# CI, part 2 (called by .ci/run after the CPU tests): the Slurm tests against a real one-node cluster.
# Brings the cluster up (job-scripts/cluster.sh: munge, MariaDB, slurmdbd, slurmctld, slurmd, account),
# runs `pytest -m slurm`, and always brings the cluster down again; the exit status is pytest's (or
# cluster.sh's, when the cluster cannot start). Needs root (apt-get, mknod, daemons). Extra arguments go
# to pytest, e.g. `bash .ci/slurm.sh -k sbatch`.
set -euo pipefail
cd "$(dirname "$0")/.."

py=.venv/bin/python
[[ -x $py ]] || py=python3

teardown() {
    local rc=$?
    echo "[ci/slurm] tearing the cluster down (exit status so far: $rc)"
    bash job-scripts/cluster.sh down || echo "[ci/slurm] WARNING: cluster.sh down failed" >&2
    exit "$rc"
}
trap teardown EXIT

echo "[ci/slurm] bringing the one-node Slurm cluster up"
eval "$(bash job-scripts/cluster.sh up)"   # exports SLURM_CONF
bash job-scripts/cluster.sh status
# Skipping would hide a broken cluster: here a missing cluster is a failure.
MKH_SLURM_REQUIRED=1 "$py" -m pytest -m slurm -v -rs -p no:cacheprovider tests/test_slurm.py "$@"
