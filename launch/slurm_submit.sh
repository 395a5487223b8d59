#!/usr/bin/env bash
# Submits launch/slurm_gpu.sbatch with the node count, GPUs per node and process layout given
# here, so the #SBATCH defaults need no editing. See docs/launch.md.
#
#   launch/slurm_submit.sh NODES GPUS_PER_NODE [per-gpu|per-node] -- TRAINING ARGS...
#   launch/slurm_submit.sh 4 8 -- --config=configs/picl_nq.py --workdir=/shared/runs/picl
#
# per-gpu (default): one JAX process per GPU (ntasks-per-node = GPUS_PER_NODE); each process
# drives its GPU. per-node: one process per node driving all its GPUs.
#
# Environment: PARTITION, ACCOUNT, TIME (default 24:00:00), JOB_NAME (default dense-cf),
# CPUS_PER_GPU (default 8), SBATCH_EXTRA (extra sbatch flags, space separated),
# DRY_RUN=1 (print the sbatch command instead of submitting).
set -euo pipefail

usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//'; }
die() { echo "slurm_submit.sh: $*" >&2; exit 2; }

(($# >= 2)) || { usage; exit 2; }
nodes="$1"
gpus="$2"
shift 2
layout="per-gpu"
if (($# > 0)) && [[ "$1" != "--" ]]; then
  layout="$1"
  shift
fi
if (($# > 0)) && [[ "$1" == "--" ]]; then
  shift
fi
[[ "${nodes}" =~ ^[1-9][0-9]*$ ]] || die "NODES must be a positive integer, got '${nodes}'"
[[ "${gpus}" =~ ^[1-9][0-9]*$ ]] || die "GPUS_PER_NODE must be a positive integer, got '${gpus}'"
(($# > 0)) || die "no training arguments after --, e.g. -- --config=configs/picl_nq.py --workdir=/shared/runs/x"

cpus_per_gpu="${CPUS_PER_GPU:-8}"
case "${layout}" in
  per-gpu) tasks_per_node="${gpus}"; cpus_per_task="${cpus_per_gpu}" ;;
  per-node) tasks_per_node=1; cpus_per_task=$((cpus_per_gpu * gpus)) ;;
  *) die "layout must be per-gpu or per-node, got '${layout}'" ;;
esac

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
args=(sbatch "--job-name=${JOB_NAME:-dense-cf}" "--nodes=${nodes}" "--gpus-per-node=${gpus}"
  "--ntasks-per-node=${tasks_per_node}" "--cpus-per-task=${cpus_per_task}"
  "--time=${TIME:-24:00:00}" "--chdir=$(dirname "${here}")")
if [[ -n "${PARTITION:-}" ]]; then
  args+=("--partition=${PARTITION}")
fi
if [[ -n "${ACCOUNT:-}" ]]; then
  args+=("--account=${ACCOUNT}")
fi
if [[ -n "${SBATCH_EXTRA:-}" ]]; then
  read -r -a extra <<< "${SBATCH_EXTRA}"
  args+=("${extra[@]}")
fi
args+=("${here}/slurm_gpu.sbatch" "$@")

if [[ "${DRY_RUN:-0}" == 1 ]]; then
  printf '+'
  printf ' %q' "${args[@]}"
  printf '\n'
else
  "${args[@]}"
fi
