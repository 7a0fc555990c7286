#!/usr/bin/env bash
# Run ptm on a Cloud TPU pod slice: every worker (host) runs the same `ptm` command; JAX detects the pod
# (jax.distributed.initialize() with no arguments) and each host feeds its own rows of every batch.
#
#   launch/tpu_pod.sh create                      # TPU VM (or a queued resource with QUEUED=1)
#   launch/tpu_pod.sh setup                       # copy this checkout to every worker, install, mount bucket
#   launch/tpu_pod.sh run pretrain -c bert_base output_dir=/home/$USER/ptm-bucket/runs/b1 train.steps=100000
#   launch/tpu_pod.sh logs                        # fetch every worker's log into ./tpu-logs/<name>/
#   launch/tpu_pod.sh status | health | stop | ssh | delete
#   launch/tpu_pod.sh resume                      # after a maintenance event / reboot: remount, run the last command
#   launch/tpu_pod.sh watch                       # resume by itself whenever the run stopped early or was killed
#
# Settings (environment variables; see launch/README.md):
#   TPU_NAME (ptm-pod)  ZONE (us-central2-b)  PROJECT (gcloud default)  ACCELERATOR_TYPE (v4-32)
#   RUNTIME_VERSION (tpu-ubuntu2204-base)  SPOT (0)  QUEUED (0)  QR_ID (${TPU_NAME}-qr)  AUTOCHECKPOINT (1)
#   BUCKET (empty: no mount)  MOUNT (ptm-bucket, under the remote home)  JAX_SPEC (jax[tpu])
#   REMOTE_DIR (ptm_jax)  VENV (ptm-venv)  LOG_DIR (./tpu-logs)  WATCH_INTERVAL (300)  MAX_RESUMES (50)
#
# Checkpoints, the tokenizer and the token cache must live on storage every worker sees: give
# output_dir=gs://BUCKET/... (ptm writes it through gcsfs; no mount needed). BUCKET mounts the bucket with
# gcsfuse at ~/$MOUNT on each worker, for reading corpora as files only.
# AUTOCHECKPOINT=1 creates the TPU with --autocheckpoint-enabled (gcloud alpha): before a maintenance event Cloud
# TPU sends SIGTERM and waits up to 5 minutes; ptm saves a checkpoint at the next step and exits 0.
set -euo pipefail

TPU_NAME="${TPU_NAME:-ptm-pod}"
ZONE="${ZONE:-us-central2-b}"
PROJECT="${PROJECT:-}"
ACCELERATOR_TYPE="${ACCELERATOR_TYPE:-v4-32}"
RUNTIME_VERSION="${RUNTIME_VERSION:-tpu-ubuntu2204-base}"
SPOT="${SPOT:-0}"
QUEUED="${QUEUED:-0}"
QR_ID="${QR_ID:-${TPU_NAME}-qr}"
BUCKET="${BUCKET:-}"
MOUNT="${MOUNT:-ptm-bucket}"
JAX_SPEC="${JAX_SPEC:-jax[tpu]}"
REMOTE_DIR="${REMOTE_DIR:-ptm_jax}"
VENV="${VENV:-ptm-venv}"
LOG_DIR="${LOG_DIR:-./tpu-logs}"
AUTOCHECKPOINT="${AUTOCHECKPOINT:-1}"
WATCH_INTERVAL="${WATCH_INTERVAL:-300}"
MAX_RESUMES="${MAX_RESUMES:-50}"
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

GCLOUD_FLAGS=(--zone="$ZONE")
if [[ -n "$PROJECT" ]]; then
  GCLOUD_FLAGS+=(--project="$PROJECT")
fi

die() { echo "tpu_pod.sh: $*" >&2; exit 2; }

# Runs a shell command on every worker of the slice.
on_all() {
  gcloud compute tpus tpu-vm ssh "$TPU_NAME" "${GCLOUD_FLAGS[@]}" --worker=all --command="$1"
}

num_workers() {
  local ips
  ips="$(gcloud compute tpus tpu-vm describe "$TPU_NAME" "${GCLOUD_FLAGS[@]}" \
    --format='value(networkEndpoints[].ipAddress)')"
  [[ -n "$ips" ]] || die "no workers found for $TPU_NAME in $ZONE (is it created and READY?)"
  tr ';,' '\n' <<<"$ips" | grep -c .
}

cmd_create() {
  local spot=() track=() autockpt=()
  if [[ "$SPOT" == 1 ]]; then
    spot=(--spot)
  fi
  if [[ "$AUTOCHECKPOINT" == 1 ]]; then
    # Preview feature: SIGTERM to the process using the TPU, then up to 5 minutes before maintenance starts.
    track=(alpha)
    autockpt=(--autocheckpoint-enabled)
  fi
  if [[ "$QUEUED" == 1 ]]; then
    gcloud "${track[@]}" compute tpus queued-resources create "$QR_ID" "${GCLOUD_FLAGS[@]}" --node-id="$TPU_NAME" \
      --accelerator-type="$ACCELERATOR_TYPE" --runtime-version="$RUNTIME_VERSION" "${spot[@]}" "${autockpt[@]}"
    echo "waiting for queued resource $QR_ID to become ACTIVE (Ctrl-C leaves it queued)"
    local state=""
    while [[ "$state" != "ACTIVE" ]]; do
      state="$(gcloud compute tpus queued-resources describe "$QR_ID" "${GCLOUD_FLAGS[@]}" \
        --format='value(state.state)')"
      case "$state" in
        FAILED|SUSPENDED) die "queued resource $QR_ID is $state" ;;
      esac
      echo "  $(date +%T) $state"
      [[ "$state" == "ACTIVE" ]] || sleep 60
    done
  else
    gcloud "${track[@]}" compute tpus tpu-vm create "$TPU_NAME" "${GCLOUD_FLAGS[@]}" \
      --accelerator-type="$ACCELERATOR_TYPE" --version="$RUNTIME_VERSION" "${spot[@]}" "${autockpt[@]}"
  fi
}

cmd_setup() {
  local tarball
  tarball="$(mktemp -t ptm_jax.XXXXXX.tgz)"
  # the working tree as it is (uncommitted edits included), without runs, caches and VCS data
  tar -C "$REPO" --exclude=./.git --exclude=./runs --exclude='*/__pycache__' --exclude=./.venv \
    -czf "$tarball" .
  gcloud compute tpus tpu-vm scp "$tarball" "$TPU_NAME:ptm_jax.tgz" "${GCLOUD_FLAGS[@]}" --worker=all
  rm -f "$tarball"
  on_all "set -e
    rm -rf ~/$REMOTE_DIR && mkdir -p ~/$REMOTE_DIR ~/ptm-logs && tar -xzf ~/ptm_jax.tgz -C ~/$REMOTE_DIR
    python3 -m venv ~/$VENV
    ~/$VENV/bin/pip install -q -U pip
    ~/$VENV/bin/pip install -q -e ~/$REMOTE_DIR '$JAX_SPEC'
    ~/$VENV/bin/python -c 'import jax; print(jax.process_index(), jax.device_count(), jax.devices()[0])'"
  cmd_remount
}

# Mounts the bucket on every worker (again after a reboot: maintenance events restart the VMs).
cmd_remount() {
  if [[ -n "$BUCKET" ]]; then
    on_all "set -e
      if ! command -v gcsfuse >/dev/null; then
        echo \"deb [signed-by=/usr/share/keyrings/cloud.google.asc] https://packages.cloud.google.com/apt gcsfuse-\$(lsb_release -cs) main\" | sudo tee /etc/apt/sources.list.d/gcsfuse.list >/dev/null
        curl -fsSL https://packages.cloud.google.com/apt/doc/apt-key.gpg | sudo tee /usr/share/keyrings/cloud.google.asc >/dev/null
        sudo apt-get update -q && sudo apt-get install -y -q gcsfuse
      fi
      mkdir -p ~/$MOUNT
      mountpoint -q ~/$MOUNT || gcsfuse --implicit-dirs '$BUCKET' ~/$MOUNT"
  fi
}

cmd_run() {
  [[ $# -gt 0 ]] || die "usage: tpu_pod.sh run <ptm subcommand> [args...], e.g. run pretrain -c bert_base"
  local args
  args="$(printf '%q ' "$@")"
  # The command is kept on every worker (~/ptm-logs/ptm.cmd) for `resume`; its exit status goes to ptm.exit
  # (absent while it runs, or when the VM was rebooted under it).
  on_all "mkdir -p ~/ptm-logs && printf '%s\n' $(printf '%q' "$args") > ~/ptm-logs/ptm.cmd"
  start_saved
}

# Starts the saved command on every worker, detached (a dropped ssh session does not stop training; the pid
# file lets `stop` signal exactly it).
start_saved() {
  on_all "cd ~/$REMOTE_DIR && mkdir -p ~/ptm-logs
    [[ -f ~/ptm-logs/ptm.cmd ]] || { echo 'no saved command: use run first' >&2; exit 1; }
    if [[ -f ~/ptm-logs/ptm.pid ]] && kill -0 \"\$(cat ~/ptm-logs/ptm.pid)\" 2>/dev/null; then
      echo 'a ptm process is already running on this worker; stop it first' >&2; exit 1
    fi
    rm -f ~/ptm-logs/ptm.exit ~/ptm-logs/ptm.started
    date +%s > ~/ptm-logs/ptm.started
    nohup bash -c \"~/$VENV/bin/python -m ptm_jax.cli \$(cat ~/ptm-logs/ptm.cmd); echo \\\$? > ~/ptm-logs/ptm.exit\" \\
      >> ~/ptm-logs/ptm.log 2>&1 < /dev/null &
    echo \$! > ~/ptm-logs/ptm.pid
    echo \"started pid \$(cat ~/ptm-logs/ptm.pid) on \$(hostname): ptm \$(cat ~/ptm-logs/ptm.cmd)\""
}

# After a maintenance event, a reboot or an early stop: remount and start the saved command again; ptm resumes
# from the latest checkpoint in its output_dir (the tokenizer and token cache are reused).
cmd_resume() {
  cmd_remount
  start_saved
}

cmd_health() {
  gcloud compute tpus tpu-vm describe "$TPU_NAME" "${GCLOUD_FLAGS[@]}" --format='value(state,health)'
}

# What worker 0 says about the last start: running | stopped-early | killed | done | failed:<status>
run_state() {
  gcloud compute tpus tpu-vm ssh "$TPU_NAME" "${GCLOUD_FLAGS[@]}" --worker=0 --command="
    if [[ -f ~/ptm-logs/ptm.pid ]] && kill -0 \"\$(cat ~/ptm-logs/ptm.pid)\" 2>/dev/null; then echo running; exit; fi
    if [[ ! -f ~/ptm-logs/ptm.exit ]]; then echo killed; exit; fi
    code=\$(cat ~/ptm-logs/ptm.exit)
    if [[ \$code != 0 ]]; then echo failed:\$code; exit; fi
    if cd ~/$REMOTE_DIR && PYTHONPATH=. ~/$VENV/bin/python launch/stopped_early.py \"\$(cat ~/ptm-logs/ptm.started)\" \
        --command-file ~/ptm-logs/ptm.cmd >/dev/null; then echo stopped-early; else echo done; fi" 2>/dev/null | tail -n 1
}

# Polls every WATCH_INTERVAL s; resumes when the TPU is READY and the run stopped early or was killed.
cmd_watch() {
  local resumes=0 state health
  while true; do
    health="$(cmd_health || true)"
    if [[ "$health" == READY* ]]; then
      state="$(run_state || echo unknown)"
      echo "$(date +%T) tpu: $health  run: $state"
      case "$state" in
        done) echo "run finished"; return 0 ;;
        failed:*) die "the run failed ($state); see: launch/tpu_pod.sh logs" ;;
        stopped-early|killed)
          resumes=$((resumes + 1))
          [[ $resumes -le $MAX_RESUMES ]] || die "MAX_RESUMES=$MAX_RESUMES reached"
          cmd_stop >/dev/null 2>&1 || true  # a worker whose process outlived the others
          sleep 30
          cmd_resume ;;
      esac
    else
      echo "$(date +%T) tpu: ${health:-unknown} (waiting for READY)"
    fi
    sleep "$WATCH_INTERVAL"
  done
}

cmd_logs() {
  local n dest
  n="$(num_workers)"
  dest="$LOG_DIR/$TPU_NAME"
  mkdir -p "$dest"
  for ((i = 0; i < n; i++)); do
    gcloud compute tpus tpu-vm scp "$TPU_NAME:ptm-logs/ptm.log" "$dest/worker-$i.log" "${GCLOUD_FLAGS[@]}" \
      --worker="$i" || echo "worker $i: no log yet" >&2
  done
  echo "logs of $n workers in $dest"
  tail -n 5 "$dest/worker-0.log" 2>/dev/null || true
}

cmd_status() {
  on_all "if [[ -f ~/ptm-logs/ptm.pid ]] && kill -0 \"\$(cat ~/ptm-logs/ptm.pid)\" 2>/dev/null; then
      echo \"\$(hostname): running (pid \$(cat ~/ptm-logs/ptm.pid)): \$(tail -n 1 ~/ptm-logs/ptm.log)\"
    else echo \"\$(hostname): not running\"; fi"
}

cmd_stop() {
  # SIGTERM, as a preemption would: ptm checkpoints at the next step boundary and exits 0
  on_all "if [[ -f ~/ptm-logs/ptm.pid ]]; then kill -TERM \"\$(cat ~/ptm-logs/ptm.pid)\" 2>/dev/null || true; fi"
}

cmd_delete() {
  if [[ "$QUEUED" == 1 ]]; then
    gcloud compute tpus queued-resources delete "$QR_ID" "${GCLOUD_FLAGS[@]}" --force --quiet
  else
    gcloud compute tpus tpu-vm delete "$TPU_NAME" "${GCLOUD_FLAGS[@]}" --quiet
  fi
}

main() {
  local sub="${1:-}"
  shift || true
  case "$sub" in
    create) cmd_create ;;
    setup) cmd_setup ;;
    run) cmd_run "$@" ;;
    resume) cmd_resume ;;
    remount) cmd_remount ;;
    watch) cmd_watch ;;
    health) cmd_health ;;
    logs) cmd_logs ;;
    status) cmd_status ;;
    stop) cmd_stop ;;
    ssh) gcloud compute tpus tpu-vm ssh "$TPU_NAME" "${GCLOUD_FLAGS[@]}" --worker="${1:-0}" ;;
    delete) cmd_delete ;;
    *) sed -n '2,26p' "${BASH_SOURCE[0]}"; [[ "$sub" == "" || "$sub" == "-h" || "$sub" == "--help" ]] ;;
  esac
}

main "$@"
