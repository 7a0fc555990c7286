#!/usr/bin/env bash
# Run ptm on a Cloud TPU pod slice: every worker (host) runs the same `ptm` command; JAX detects the pod
# (jax.distributed.initialize() with no arguments) and each host feeds its own rows of every batch.
#
#   launch/tpu_pod.sh create                      # TPU VM (or a queued resource with QUEUED=1)
#   launch/tpu_pod.sh setup                       # copy this checkout to every worker, Python >= 3.11 venv, mount
#   launch/tpu_pod.sh run pretrain -c bert_base output_dir=gs://my-bucket/runs/b1 train.steps=100000
#   launch/tpu_pod.sh logs                        # fetch every worker's log into ./tpu-logs/<name>/
#   launch/tpu_pod.sh status | health | ssh | delete
#   launch/tpu_pod.sh stop                        # SIGTERM to python on every worker; wait; say how it ended
#   launch/tpu_pod.sh kill                        # SIGKILL (a process stuck after the others ended)
#   launch/tpu_pod.sh resume                      # after a maintenance event / reboot: remount, run the last command
#   launch/tpu_pod.sh watch                       # resume by itself whenever the run stopped early or was killed
#
# Settings (environment variables; see launch/README.md):
#   TPU_NAME (ptm-pod)  ZONE (us-central2-b)  PROJECT (gcloud default)  ACCELERATOR_TYPE (v4-32)
#   RUNTIME_VERSION (tpu-ubuntu2204-base)  SPOT (0)  QUEUED (0)  QR_ID (${TPU_NAME}-qr)  AUTOCHECKPOINT (1)
#   BUCKET (empty: no mount)  MOUNT (ptm-bucket, under the remote home)  JAX_SPEC (jax[tpu])
#   PYTHON_VERSION (3.11)  REMOTE_DIR (ptm_jax)  VENV (ptm-venv)  LOG_DIR (./tpu-logs)
#   PTM_ENV_FILE (empty)  STOP_WAIT (300)  WATCH_INTERVAL (300)  MAX_RESUMES (50)
#
# Checkpoints, the tokenizer and the token cache must live on storage every worker sees: give
# output_dir=gs://BUCKET/... (ptm writes it through gcsfs; no mount needed). BUCKET mounts the bucket with
# gcsfuse at ~/$MOUNT on each worker, for reading corpora as files only.
# AUTOCHECKPOINT=1 creates the TPU with --autocheckpoint-enabled (gcloud alpha): before a maintenance event Cloud
# TPU sends SIGTERM and waits up to 5 minutes; ptm saves a checkpoint at the next step and exits 0.
# PTM_ENV_FILE: a shell file copied to every worker by setup, run and resume (when set) and sourced there
# before python starts (TFDS_DATA_DIR, LIBTPU_INIT_ARGS, XLA_FLAGS, PTM_LOCAL_SCRATCH, ...). Local copies of
# gs:// files go to PTM_LOCAL_SCRATCH, by default ~/ptm-scratch on each worker (kept across reboots).
# The worker side of every command is launch/tpu_worker.sh.
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
PYTHON_VERSION="${PYTHON_VERSION:-3.11}"
REMOTE_DIR="${REMOTE_DIR:-ptm_jax}"
VENV="${VENV:-ptm-venv}"
PTM_ENV_FILE="${PTM_ENV_FILE:-}"
STOP_WAIT="${STOP_WAIT:-300}"
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

# Runs a shell command on every worker of the slice (gcloud runs the workers' sessions in parallel).
on_all() {
  gcloud compute tpus tpu-vm ssh "$TPU_NAME" "${GCLOUD_FLAGS[@]}" --worker=all --command="$1"
}

# Runs launch/tpu_worker.sh <args> on workers $1 (all, or a worker number), with this script's settings.
worker() {
  local which="$1"
  shift
  gcloud compute tpus tpu-vm ssh "$TPU_NAME" "${GCLOUD_FLAGS[@]}" --worker="$which" --command="$(printf '%q=%q ' \
    REMOTE_DIR "$REMOTE_DIR" VENV "$VENV" PYTHON_VERSION "$PYTHON_VERSION" JAX_SPEC "$JAX_SPEC") bash \
    ~/$(printf '%q' "$REMOTE_DIR")/launch/tpu_worker.sh $(printf '%q ' "$@")"
}

num_workers() {
  local ips
  ips="$(gcloud compute tpus tpu-vm describe "$TPU_NAME" "${GCLOUD_FLAGS[@]}" \
    --format='value(networkEndpoints[].ipAddress)')"
  [[ -n "$ips" ]] || die "no workers found for $TPU_NAME in $ZONE (is it created and READY?)"
  tr ';,' '\n' <<<"$ips" | grep -c .
}

# Copies PTM_ENV_FILE (when set) to ~/ptm-logs/ptm.env on every worker; tpu_worker.sh sources it before python.
push_env_file() {
  [[ -n "$PTM_ENV_FILE" ]] || return 0
  [[ -f "$PTM_ENV_FILE" ]] || die "PTM_ENV_FILE=$PTM_ENV_FILE: no such file"
  bash -n "$PTM_ENV_FILE" || die "PTM_ENV_FILE=$PTM_ENV_FILE: not a valid shell file (see bash's message above)"
  on_all "mkdir -p ~/ptm-logs"
  gcloud compute tpus tpu-vm scp "$PTM_ENV_FILE" "$TPU_NAME:ptm-logs/ptm.env" "${GCLOUD_FLAGS[@]}" --worker=all
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
  refuse_if_running || exit 3  # setup replaces the checkout a run is using
  tarball="$(mktemp -t ptm_jax.XXXXXX.tgz)"
  # the working tree as it is (uncommitted edits included), without runs, caches and VCS data
  tar -C "$REPO" --exclude=./.git --exclude=./runs --exclude='*/__pycache__' --exclude=./.venv \
    -czf "$tarball" .
  gcloud compute tpus tpu-vm scp "$tarball" "$TPU_NAME:ptm_jax.tgz" "${GCLOUD_FLAGS[@]}" --worker=all
  rm -f "$tarball"
  on_all "set -e
    rm -rf ~/$REMOTE_DIR && mkdir -p ~/$REMOTE_DIR ~/ptm-logs && tar -xzf ~/ptm_jax.tgz -C ~/$REMOTE_DIR"
  # a Python >= 3.11 environment whatever the image's python3 is (tpu-ubuntu2204-base ships 3.10)
  worker all install
  push_env_file
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

# "ptm-state: ..." lines, one per worker (see tpu_worker.sh state).
worker_states() {
  worker all state 2>/dev/null | grep '^ptm-state: ' || true
}

# The run as a whole: none | running | partial (some workers still run) | killed | failed:<status> |
# stopped-early | done. An exit status >= 128 (a signal) or a missing one (a reboot) counts as killed.
run_state() {
  local lines n total running=0 killed=0 exited0=0 failed="" token
  lines="$(worker_states)"
  total="$(num_workers)"
  n="$(grep -c . <<<"$lines" || true)"
  while read -r _ token _; do
    case "$token" in
      running) running=$((running + 1)) ;;
      killed) killed=$((killed + 1)) ;;
      exited:0) exited0=$((exited0 + 1)) ;;
      exited:*) local code="${token#exited:}"
        if [[ "$code" =~ ^[0-9]+$ ]] && (( code >= 128 )); then killed=$((killed + 1)); else failed="$code"; fi ;;
    esac
  done <<<"$lines"
  if (( running > 0 )); then
    if (( running == total )); then echo running; else echo partial; fi
  elif (( n < total )); then echo unknown  # a worker did not answer
  elif (( killed > 0 )); then echo killed
  elif [[ -n "$failed" ]]; then echo "failed:$failed"
  elif (( exited0 == total )); then
    local early=0 said
    said="$(stopped_early_on_worker0)" || early=$?
    case "$early" in
      0) echo stopped-early ;;
      1) echo done ;;
      *) echo "tpu_pod.sh: cannot tell whether the run stopped early (launch/stopped_early.py on worker 0," \
           "exit $early): $(grep -v '^stopped early: ' <<<"$said" | tail -n 3)" >&2
         echo unknown ;;
    esac
  else echo none
  fi
}

# Exit 0 (and the summary that says so) when the last start stopped early with a checkpoint, in any stage.
stopped_early_on_worker0() {
  gcloud compute tpus tpu-vm ssh "$TPU_NAME" "${GCLOUD_FLAGS[@]}" --worker=0 --command="
    set -a; [[ -f ~/ptm-logs/ptm.env ]] && source ~/ptm-logs/ptm.env; set +a
    cd ~/$REMOTE_DIR && PYTHONPATH=. $(venv_python) launch/stopped_early.py \"\$(cat ~/ptm-logs/ptm.started)\" \
      --command-file ~/ptm-logs/ptm.cmd 2>&1" 2>/dev/null
}

venv_python() {
  if [[ "$VENV" == /* ]]; then printf '%q/bin/python' "$VENV"; else printf '~/%q/bin/python' "$VENV"; fi
}

# Refuses (exit 3) while a ptm run lives on any worker: a second copy would fight for the chips and the
# coordinator port.
refuse_if_running() {
  local busy
  busy="$(worker_states | grep '^ptm-state: running' || true)"
  if [[ -n "$busy" ]]; then
    echo "tpu_pod.sh: a ptm run is still running; stop it first (launch/tpu_pod.sh stop):" >&2
    sed 's/^ptm-state: running /  /' <<<"$busy" >&2
    return 3
  fi
}

cmd_run() {
  [[ $# -gt 0 ]] || die "usage: tpu_pod.sh run <ptm subcommand> [args...], e.g. run pretrain -c bert_base"
  refuse_if_running || exit 3
  push_env_file
  local args
  args="$(printf '%q ' "$@")"
  # The command is kept on every worker (~/ptm-logs/ptm.cmd) for `resume`; its exit status goes to ptm.exit
  # (absent while it runs, or when the VM was rebooted under it).
  worker all check  # every worker can start, or none starts
  on_all "mkdir -p ~/ptm-logs && printf '%s\n' $(printf '%q' "$args") > ~/ptm-logs/ptm.cmd"
  worker all start
}

# After a maintenance event, a reboot or an early stop: remount and start the saved command again; ptm resumes
# from the latest checkpoint in its output_dir (the tokenizer and token cache are reused).
cmd_resume() {
  refuse_if_running || return 3
  worker all check || return 2
  cmd_remount
  push_env_file
  worker all start
}

cmd_health() {
  gcloud compute tpus tpu-vm describe "$TPU_NAME" "${GCLOUD_FLAGS[@]}" --format='value(state,health)'
}

# Polls every WATCH_INTERVAL s; resumes when the TPU is READY and the run stopped early or was killed. Workers
# still running while others ended (a host that died mid-run leaves the rest stuck) are stopped first.
cmd_watch() {
  local resumes=0 state health
  while true; do
    health="$(cmd_health || true)"
    if [[ "$health" == READY* ]]; then
      state="$(run_state || echo unknown)"
      echo "$(date +%T) tpu: $health  run: $state"
      case "$state" in
        done) echo "run finished"; return 0 ;;
        none) die "nothing was started on $TPU_NAME: use run first" ;;
        failed:*) die "the run failed ($state); see: launch/tpu_pod.sh logs" ;;
        partial) cmd_stop || cmd_kill ;;
        stopped-early|killed)
          resumes=$((resumes + 1))
          [[ $resumes -le $MAX_RESUMES ]] || die "MAX_RESUMES=$MAX_RESUMES reached"
          cmd_resume || echo "$(date +%T) resume refused; trying again at the next poll" ;;
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
  local lines
  lines="$(worker_states)"
  [[ -n "$lines" ]] || die "no worker answered"
  sed 's/^ptm-state: //' <<<"$lines"
  echo "run: $(run_state)"
}

# SIGTERM to python on every worker, as a preemption would: ptm checkpoints at the next step boundary, writes
# "preempted": true and exits 0. Waits up to STOP_WAIT s for every worker, then says how the run ended.
cmd_stop() {
  local out rc=0 state
  out="$(worker all stop "$STOP_WAIT" 2>&1)" || rc=$?
  grep -q '^ptm-stop: ' <<<"$out" || die "no worker answered: $out"
  grep '^ptm-stop: ' <<<"$out" | sed 's/^ptm-stop: //' || true
  if grep -q '^ptm-stop: .* still running' <<<"$out" || (( rc != 0 )); then
    echo "tpu_pod.sh: not every worker ended within STOP_WAIT=$STOP_WAIT s; wait longer, or: launch/tpu_pod.sh kill" >&2
    return 1
  fi
  state="$(run_state)"
  case "$state" in
    stopped-early) echo "stopped early with a checkpoint ($(stopped_early_on_worker0 | sed -n 's/^stopped early: //p' | \
      paste -sd, -)); launch/tpu_pod.sh resume continues it" ;;
    done) echo "the run had finished: nothing to resume" ;;
    killed) echo "killed: no checkpoint at the stop; resume starts from the last saved one" ;;
    *) echo "run: $state" ;;
  esac
}

cmd_kill() {
  worker all kill
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
    kill) cmd_kill ;;
    ssh) gcloud compute tpus tpu-vm ssh "$TPU_NAME" "${GCLOUD_FLAGS[@]}" --worker="${1:-0}" ;;
    delete) cmd_delete ;;
    *) sed -n '2,32p' "${BASH_SOURCE[0]}"; [[ "$sub" == "" || "$sub" == "-h" || "$sub" == "--help" ]] ;;
  esac
}

main "$@"
