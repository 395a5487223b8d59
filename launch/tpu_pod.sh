#!/usr/bin/env bash
# Cloud TPU pod launcher for dense_cf: create the TPU VM (directly or as a queued resource),
# install this checkout on every worker, run the same training command on all workers, tail the
# log, delete. See docs/launch.md.
#
#   ZONE=us-central2-b ACCELERATOR_TYPE=v4-32 launch/tpu_pod.sh create
#   launch/tpu_pod.sh install
#   launch/tpu_pod.sh run -- --config=configs/picl_nq.py --workdir=/mnt/runs/picl
#   launch/tpu_pod.sh logs
#   launch/tpu_pod.sh delete
#   launch/tpu_pod.sh all -- --config=...   # create, install, run attached, delete (always)
#
# Settings (environment):
#   ZONE (required)          e.g. us-central2-b
#   PROJECT                  gcloud project (default: gcloud's configured project)
#   TPU_NAME                 default dense-cf-$USER
#   ACCELERATOR_TYPE         default v4-32 (4 workers x 4 chips)
#   RUNTIME_VERSION          default tpu-ubuntu2204-base
#   QUEUED=1                 request through `queued-resources` (waits until ACTIVE)
#   SPOT=1                   spot capacity
#   POLL_SECONDS             queued-resource polling interval (default 30)
#   PYTHON_VERSION           Python for the workers' venv, installed by uv (default 3.11)
#   GCS_BUCKET, MOUNT_POINT  optional: gcsfuse-mount gs://GCS_BUCKET at MOUNT_POINT (default
#                            /mnt/$GCS_BUCKET) on every worker during `install`; the workdir
#                            must be on storage all workers share (checkpoints are written by
#                            every host)
#   REMOTE_DIR               checkout location on the workers (default dense_cf, under $HOME)
#   LOG_WORKER               worker whose log `logs` tails (default 0)
#   DRY_RUN=1                print the gcloud commands instead of running them
#   MAX_RESTARTS             `all`: rerun the training command this many times when it exits
#                            75 (stopped on SIGTERM, e.g. maintenance, after saving the step in
#                            flight; it resumes from there). Default 20
set -euo pipefail

TPU_NAME="${TPU_NAME:-dense-cf-${USER:-user}}"
ACCELERATOR_TYPE="${ACCELERATOR_TYPE:-v4-32}"
RUNTIME_VERSION="${RUNTIME_VERSION:-tpu-ubuntu2204-base}"
QUEUED="${QUEUED:-0}"
SPOT="${SPOT:-0}"
POLL_SECONDS="${POLL_SECONDS:-30}"
PYTHON_VERSION="${PYTHON_VERSION:-3.11}"
REMOTE_DIR="${REMOTE_DIR:-dense_cf}"
LOG_WORKER="${LOG_WORKER:-0}"
DRY_RUN="${DRY_RUN:-0}"
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
LOG_FILE="${REMOTE_DIR}/run.log"
PID_FILE="${REMOTE_DIR}/run.pid"

die() { echo "tpu_pod.sh: $*" >&2; exit 2; }

usage() {
  sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//'
  echo "Subcommands: create | install | run [-- ARGS] | logs | stop | delete | all [-- ARGS]"
}

# Runs (or, with DRY_RUN=1, prints) one command, shell-quoted so it can be pasted.
x() {
  if [[ "${DRY_RUN}" == 1 ]]; then
    printf '+'
    printf ' %q' "$@"
    printf '\n'
  else
    "$@"
  fi
}

gcloud_tpu() {  # gcloud compute tpus ... with the zone/project every call needs
  local args=(compute tpus "$@" "--zone=${ZONE}")
  if [[ -n "${PROJECT:-}" ]]; then
    args+=("--project=${PROJECT}")
  fi
  x gcloud "${args[@]}"
}

# The same command on every worker: `--worker=all` is what makes a pod run one JAX program.
on_all_workers() {
  gcloud_tpu tpu-vm ssh "${TPU_NAME}" --worker=all --command="$1"
}

require_zone() {
  [[ -n "${ZONE:-}" ]] || die "set ZONE (e.g. ZONE=us-central2-b)"
}

cmd_create() {
  local capacity=()
  if [[ "${SPOT}" == 1 ]]; then
    capacity+=(--spot)
  fi
  if [[ "${QUEUED}" == 1 ]]; then
    gcloud_tpu queued-resources create "${TPU_NAME}" --node-id="${TPU_NAME}" \
      --accelerator-type="${ACCELERATOR_TYPE}" --runtime-version="${RUNTIME_VERSION}" \
      "${capacity[@]}"
    wait_active
  else
    gcloud_tpu tpu-vm create "${TPU_NAME}" --accelerator-type="${ACCELERATOR_TYPE}" \
      --version="${RUNTIME_VERSION}" "${capacity[@]}"
  fi
}

wait_active() {
  if [[ "${DRY_RUN}" == 1 ]]; then
    echo "# (polls queued-resources describe until the state is ACTIVE)"
    return
  fi
  local state
  while true; do
    state="$(gcloud_tpu queued-resources describe "${TPU_NAME}" --format='value(state.state)')"
    echo "queued resource ${TPU_NAME}: ${state}" >&2
    case "${state}" in
      ACTIVE) return ;;
      FAILED|SUSPENDED) die "queued resource ${TPU_NAME} is ${state}" ;;
    esac
    sleep "${POLL_SECONDS}"
  done
}

cmd_install() {
  local tarball="${TMPDIR:-/tmp}/dense_cf.$$.tar.gz"
  # The working tree as it is (uncommitted edits included), without local artefacts.
  x tar -czf "${tarball}" -C "${REPO_ROOT}" --exclude=.git --exclude=.venv --exclude=runs \
    --exclude=workdirs --exclude=.jax_cache --exclude='*.egg-info' --exclude=__pycache__ .
  gcloud_tpu tpu-vm scp "${tarball}" "${TPU_NAME}:dense_cf.tar.gz" --worker=all
  x rm -f "${tarball}"
  local script
  script="set -euo pipefail
mkdir -p ${REMOTE_DIR} && tar -xzf dense_cf.tar.gz -C ${REMOTE_DIR} && rm dense_cf.tar.gz
cd ${REMOTE_DIR}
python3 -m pip install --user --quiet uv
~/.local/bin/uv venv --quiet --allow-existing --python ${PYTHON_VERSION} .venv
~/.local/bin/uv pip install --quiet --python .venv/bin/python -e '.[tpu]'"
  if [[ -n "${GCS_BUCKET:-}" ]]; then
    local mnt="${MOUNT_POINT:-/mnt/${GCS_BUCKET}}"
    script+="
if ! command -v gcsfuse >/dev/null; then
  echo \"deb [signed-by=/usr/share/keyrings/cloud.google.asc] https://packages.cloud.google.com/apt gcsfuse-\$(lsb_release -cs) main\" | sudo tee /etc/apt/sources.list.d/gcsfuse.list >/dev/null
  curl -fsSL https://packages.cloud.google.com/apt/doc/apt-key.gpg | sudo tee /usr/share/keyrings/cloud.google.asc >/dev/null
  sudo apt-get update -qq && sudo apt-get install -y -qq gcsfuse
fi
sudo mkdir -p ${mnt} && sudo chown \$(id -u):\$(id -g) ${mnt}
mountpoint -q ${mnt} || gcsfuse --implicit-dirs ${GCS_BUCKET} ${mnt}"
  fi
  on_all_workers "${script}"
}

# `python -m dense_cf.main --distributed=tpu ARGS` on every worker. Detached (nohup, pid file,
# log in ~/${LOG_FILE}) unless FOREGROUND=1, which keeps the ssh sessions attached.
cmd_run() {
  (($# > 0)) || die "run needs training arguments after --, e.g. run -- --config=configs/picl_nq.py --workdir=/mnt/bucket/runs/picl"
  local train
  train="$(printf '%q ' .venv/bin/python -m dense_cf.main --distributed=tpu "$@")"
  if [[ "${FOREGROUND:-0}" == 1 ]]; then
    on_all_workers "cd ${REMOTE_DIR} && ${train}"
  else
    on_all_workers "cd ${REMOTE_DIR} && nohup ${train}> run.log 2>&1 < /dev/null & echo \$! > run.pid"
  fi
}

cmd_logs() {
  gcloud_tpu tpu-vm ssh "${TPU_NAME}" "--worker=${LOG_WORKER}" --command="tail -n 200 -F ${LOG_FILE}"
}

cmd_stop() {
  on_all_workers "test -f ${PID_FILE} && kill \$(cat ${PID_FILE}) || true"
}

cmd_delete() {
  if [[ "${QUEUED}" == 1 ]]; then
    gcloud_tpu queued-resources delete "${TPU_NAME}" --force --quiet
  else
    gcloud_tpu tpu-vm delete "${TPU_NAME}" --quiet
  fi
}

cmd_all() {
  cmd_create
  trap cmd_delete EXIT  # the pod is billed until deleted: delete on success and on failure
  cmd_install
  local status restarts=0
  while :; do
    status=0
    FOREGROUND=1 cmd_run "$@" || status=$?
    # 75: dense_cf.main stopped on SIGTERM after saving the step in flight; the same command resumes.
    if [[ "${status}" != 75 ]] || ((restarts >= ${MAX_RESTARTS:-20})); then
      return "${status}"
    fi
    restarts=$((restarts + 1))
    echo "dense_cf: training preempted (status 75); restart ${restarts}" >&2
  done
}

main() {
  (($# > 0)) || { usage; exit 2; }
  local sub="$1"
  shift
  if [[ "${1:-}" == "--" ]]; then
    shift
  fi
  case "${sub}" in
    -h|--help|help) usage; return ;;
  esac
  require_zone
  case "${sub}" in
    create) cmd_create ;;
    install) cmd_install ;;
    run) cmd_run "$@" ;;
    logs) cmd_logs ;;
    stop) cmd_stop ;;
    delete) cmd_delete ;;
    all) cmd_all "$@" ;;
    *) usage; die "unknown subcommand ${sub}" ;;
  esac
}

main "$@"
