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
#   launch/tpu_pod.sh watch                       # resume by itself: an early stop, a kill, a hang (no new step
#                                                 # for HANG_MINUTES: stacks, stop, resume), a preempted, suspended,
#                                                 # terminated or deleted slice (delete, create, setup, resume)
#
# Settings (environment variables; see launch/README.md):
#   TPU_NAME (ptm-pod)  ZONE (us-central2-b)  PROJECT (gcloud default)  ACCELERATOR_TYPE (v4-32)
#   RUNTIME_VERSION (tpu-ubuntu2204-base)  SPOT (0)  QUEUED (0)  QR_ID (${TPU_NAME}-qr)  AUTOCHECKPOINT (auto)
#   BUCKET (empty: no mount)  MOUNT (ptm-bucket, under the remote home)  PTM_LOCK (requirements/tpu.lock)
#   PYTHON_VERSION (3.11)  REMOTE_DIR (ptm_jax)  VENV (ptm-venv)  LOG_DIR (./tpu-logs)
#   PTM_ENV_FILE (empty)  STOP_WAIT (300)  WATCH_INTERVAL (300)  MAX_RESUMES (50)  MAX_RECREATES (5)
#   HANG_MINUTES (30)  HANG_STARTUP_MINUTES (90)
#
# Checkpoints, the tokenizer and the token cache must live on storage every worker sees: give
# output_dir=gs://BUCKET/... (ptm writes it through gcsfs; no mount needed). BUCKET mounts the bucket with
# gcsfuse at ~/$MOUNT on each worker, for reading corpora as files only.
# AUTOCHECKPOINT=auto creates the TPU with --autocheckpoint-enabled (gcloud alpha) where Cloud TPU documents it
# (v2, v3, v4, v5e): before a maintenance event it sends SIGTERM and waits up to 5 minutes; ptm saves a checkpoint
# at the next step and exits 0. Elsewhere (v5p, v6e) watch's resume from the last periodic checkpoint covers it.
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
PTM_LOCK="${PTM_LOCK:-requirements/tpu.lock}"
PYTHON_VERSION="${PYTHON_VERSION:-3.11}"
REMOTE_DIR="${REMOTE_DIR:-ptm_jax}"
VENV="${VENV:-ptm-venv}"
PTM_ENV_FILE="${PTM_ENV_FILE:-}"
STOP_WAIT="${STOP_WAIT:-300}"
LOG_DIR="${LOG_DIR:-./tpu-logs}"
AUTOCHECKPOINT="${AUTOCHECKPOINT:-auto}"
WATCH_INTERVAL="${WATCH_INTERVAL:-300}"
MAX_RESUMES="${MAX_RESUMES:-50}"
MAX_RECREATES="${MAX_RECREATES:-5}"
HANG_MINUTES="${HANG_MINUTES:-30}"
HANG_STARTUP_MINUTES="${HANG_STARTUP_MINUTES:-90}"
HANG_SECONDS="${HANG_SECONDS:-$((HANG_MINUTES * 60))}"
HANG_STARTUP_SECONDS="${HANG_STARTUP_SECONDS:-$((HANG_STARTUP_MINUTES * 60))}"
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
    REMOTE_DIR "$REMOTE_DIR" VENV "$VENV" PYTHON_VERSION "$PYTHON_VERSION" PTM_LOCK "$PTM_LOCK") bash \
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
  on_all "mkdir -p ~/ptm-logs" || return
  gcloud compute tpus tpu-vm scp "$PTM_ENV_FILE" "$TPU_NAME:ptm-logs/ptm.env" "${GCLOUD_FLAGS[@]}" --worker=all
}

# Whether to ask for autocheckpointing: Cloud TPU documents it for v2, v3, v4 and v5e (v5litepod) only.
autocheckpoint_flags() {
  local documented=0
  case "$ACCELERATOR_TYPE" in
    v2-*|v3-*|v4-*|v5litepod-*|v5e-*) documented=1 ;;
  esac
  case "$AUTOCHECKPOINT" in
    auto) if (( documented )); then echo "--autocheckpoint-enabled"; fi ;;
    1) (( documented )) || die "AUTOCHECKPOINT=1: Cloud TPU documents autocheckpointing for v2, v3, v4 and v5e only," \
         "not $ACCELERATOR_TYPE; use AUTOCHECKPOINT=auto (watch resumes from the last periodic checkpoint)"
       echo "--autocheckpoint-enabled" ;;
    0) ;;
    *) die "AUTOCHECKPOINT=$AUTOCHECKPOINT: use auto, 1 or 0" ;;
  esac
}

cmd_create() {
  local spot=() track=() autockpt=()
  if [[ "$SPOT" == 1 ]]; then
    spot=(--spot)
  fi
  autockpt=($(autocheckpoint_flags)) || exit 2
  if (( ${#autockpt[@]} )); then
    # Preview feature: SIGTERM to the process using the TPU, then up to 5 minutes before maintenance starts.
    track=(alpha)
  fi
  if [[ "$QUEUED" == 1 ]]; then
    gcloud "${track[@]}" compute tpus queued-resources create "$QR_ID" "${GCLOUD_FLAGS[@]}" --node-id="$TPU_NAME" \
      --accelerator-type="$ACCELERATOR_TYPE" --runtime-version="$RUNTIME_VERSION" "${spot[@]}" "${autockpt[@]}" ||
      return
    echo "waiting for queued resource $QR_ID to become ACTIVE (Ctrl-C leaves it queued)"
    local state=""
    while [[ "$state" != "ACTIVE" ]]; do
      state="$(qr_state)"
      case "$state" in
        FAILED|SUSPENDED|DELETED) die "queued resource $QR_ID is $state" ;;
      esac
      echo "  $(date +%T) $state"
      [[ "$state" == "ACTIVE" ]] || sleep "${QR_POLL:-60}"
    done
  else
    gcloud "${track[@]}" compute tpus tpu-vm create "$TPU_NAME" "${GCLOUD_FLAGS[@]}" \
      --accelerator-type="$ACCELERATOR_TYPE" --version="$RUNTIME_VERSION" "${spot[@]}" "${autockpt[@]}" || return
  fi
}

cmd_setup() {
  local tarball stage
  refuse_if_running || exit 3  # setup replaces the checkout a run is using
  tarball="$(mktemp -t ptm_jax.XXXXXX.tgz)"
  stage="$(mktemp -d)"
  # the commit the copy was made from (the copy has no .git): ptm logs it at start-up (ptm_jax/versions.py)
  git -C "$REPO" describe --always --dirty --abbrev=12 > "$stage/.ptm_commit" 2>/dev/null || echo unknown > \
    "$stage/.ptm_commit"
  # the working tree as it is (uncommitted edits included), without runs, caches and VCS data
  tar -C "$REPO" --exclude=./.git --exclude=./runs --exclude='*/__pycache__' --exclude=./.venv \
    --exclude=./tpu-logs --exclude=./.ptm_commit -czf "$tarball" . -C "$stage" .ptm_commit
  rm -rf "$stage"
  # (each command checked: watch runs setup where errexit does not apply)
  gcloud compute tpus tpu-vm scp "$tarball" "$TPU_NAME:ptm_jax.tgz" "${GCLOUD_FLAGS[@]}" --worker=all ||
    { rm -f "$tarball"; return 1; }
  rm -f "$tarball"
  on_all "set -e
    rm -rf ~/$REMOTE_DIR && mkdir -p ~/$REMOTE_DIR ~/ptm-logs && tar -xzf ~/ptm_jax.tgz -C ~/$REMOTE_DIR" || return
  # a Python >= 3.11 environment holding exactly $PTM_LOCK (tpu-ubuntu2204-base ships 3.10)
  worker all install || return
  push_env_file || return
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
  # kept here too: a recreated slice (watch, after a preemption) has lost the workers' copies
  mkdir -p "$LOG_DIR/$TPU_NAME"
  printf '%s\n' "$args" > "$LOG_DIR/$TPU_NAME/ptm.cmd"
  if [[ -n "$PTM_ENV_FILE" ]]; then cp "$PTM_ENV_FILE" "$LOG_DIR/$TPU_NAME/ptm.env"; fi
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

# The state of a TPU resource from `gcloud ... describe` ($@): its first output line, DELETED when gcloud says it
# does not exist, UNKNOWN when gcloud could not tell (a network error: wait and ask again).
describe_state() {
  local out err rc=0
  err="$(mktemp)"
  out="$(gcloud "$@" 2>"$err")" || rc=$?
  if (( rc == 0 )) && [[ -n "$out" ]]; then
    head -n 1 <<<"$out"
  elif (( rc != 0 )) && grep -qiE 'NOT_FOUND|not found|does not exist' "$err"; then
    echo DELETED
  else
    echo UNKNOWN
  fi
  rm -f "$err"
}

# READY, CREATING, PREEMPTED, TERMINATED, ... of the node; DELETED; UNKNOWN.
node_state() {
  describe_state compute tpus tpu-vm describe "$TPU_NAME" "${GCLOUD_FLAGS[@]}" --format='value(state)'
}

# ACTIVE, WAITING_FOR_RESOURCES, PROVISIONING, SUSPENDED, FAILED, ... of the queued resource; DELETED; UNKNOWN.
qr_state() {
  describe_state compute tpus queued-resources describe "$QR_ID" "${GCLOUD_FLAGS[@]}" --format='value(state.state)'
}

say() { echo "$(date +%T) $*"; }

# Runs one step of a recovery ($2...) with its output in watch.log; prints one line: "<what>: ok (N s)" or
# "<what>: failed (exit S): <its last line>". Returns the step's status.
step() {
  local what="$1" t0 rc=0 log="$LOG_DIR/$TPU_NAME/watch.log"
  shift
  t0="$(date +%s)"
  echo "=== $(date -u '+%F %T') $what" >> "$log"
  # (errexit is off in here: the steps check their own commands)
  ( "$@" ) >> "$log" 2>&1 < /dev/null || rc=$?
  if (( rc == 0 )); then
    say "$what: ok ($(( $(date +%s) - t0 )) s)"
  else
    say "$what: failed (exit $rc): $(grep -v '^=== ' "$log" | tail -n 1 | cut -c1-200)"
  fi
  return "$rc"
}

# The command `run` saved here (a recreated slice has lost the workers' copies); fetched from worker 0 when only
# the workers have it (watch started on another machine).
saved_command() {
  local local_copy="$LOG_DIR/$TPU_NAME/ptm.cmd"
  if [[ ! -s "$local_copy" ]]; then
    mkdir -p "$LOG_DIR/$TPU_NAME"
    gcloud compute tpus tpu-vm scp "$TPU_NAME:ptm-logs/ptm.cmd" "$local_copy" "${GCLOUD_FLAGS[@]}" --worker=0 \
      >/dev/null 2>&1 || rm -f "$local_copy"
  fi
  [[ -s "$local_copy" ]] && cat "$local_copy"
}

# Saves the command on every worker of a fresh slice and starts it; ptm resumes from the last checkpoint in its
# output_dir (which lives on gs://, not on the deleted workers).
start_saved() {
  local args="$1"
  on_all "mkdir -p ~/ptm-logs && printf '%s\n' $(printf '%q' "$args") > ~/ptm-logs/ptm.cmd" || return
  worker all start
}

delete_quietly() {
  local rc=0 out
  out="$(cmd_delete 2>&1)" || rc=$?
  echo "$out"
  (( rc == 0 )) || grep -qiE 'NOT_FOUND|not found|does not exist' <<<"$out"
}

# A preempted, suspended, terminated or deleted slice does not come back by itself: delete what is left, create
# it again, set it up (checkout, the locked environment, env file, mount) and start the saved command.
recreate() {
  local n="$1" args env_file="$PTM_ENV_FILE" what="recreate $1/$MAX_RECREATES"
  args="$(saved_command)" || die "no saved command ($LOG_DIR/$TPU_NAME/ptm.cmd, written by run): the slice is" \
    "gone; start again with launch/tpu_pod.sh create, setup and run"
  if [[ -z "$env_file" && -f "$LOG_DIR/$TPU_NAME/ptm.env" ]]; then env_file="$LOG_DIR/$TPU_NAME/ptm.env"; fi
  step "$what: delete $([[ "$QUEUED" == 1 ]] && echo "queued resource $QR_ID" || echo "$TPU_NAME")" \
    delete_quietly || return 1
  step "$what: create $ACCELERATOR_TYPE$([[ "$SPOT" == 1 ]] && echo ' (spot)')$([[ "$QUEUED" == 1 ]] &&
    echo ' (queued)')" cmd_create || return 1
  PTM_ENV_FILE="$env_file" step "$what: setup (checkout, $PTM_LOCK, env file, mount)" cmd_setup || return 1
  step "$what: start the saved command (ptm resumes from its last checkpoint)" start_saved "$args" || return 1
}

# Polls every WATCH_INTERVAL s and acts, one line per poll and per step:
#   the slice is gone (node PREEMPTED, TERMINATED or DELETED; queued resource SUSPENDED, FAILED or DELETED):
#     delete, create, setup, start the saved command (at most MAX_RECREATES times);
#   READY, run stopped-early or killed: remount and resume (at most MAX_RESUMES times);
#   READY, run partial (a host ended, the others wait in a collective): stop (then kill) the rest, then resume;
#   READY, running, but no new step for HANG_MINUTES (HANG_STARTUP_MINUTES before the first step of a start):
#     Python stacks of every host into the logs, stop (then kill), then resume;
#   done: return 0; failed: give up (exit 2).
cmd_watch() {
  local resumes=0 recreates=0 node qr state broken
  local seen_start="" seen_step="" changed_at=0 now started stepnum idle limit
  while true; do
    broken=""
    node="$(node_state)"
    if [[ "$QUEUED" == 1 ]]; then
      qr="$(qr_state)"
      case "$qr" in
        SUSPENDED|FAILED|DELETED) broken="queued resource $QR_ID: $qr" ;;
      esac
    fi
    case "$node" in
      PREEMPTED|TERMINATED|DELETED) broken="${broken:+$broken, }tpu: $node" ;;
    esac
    if [[ -n "$broken" ]]; then
      recreates=$((recreates + 1))
      (( recreates <= MAX_RECREATES )) || die "$broken; MAX_RECREATES=$MAX_RECREATES reached"
      say "$broken -> the slice is gone: recreating it ($recreates of $MAX_RECREATES)"
      recreate "$recreates" || say "recreate $recreates/$MAX_RECREATES did not finish; trying again at the next poll"
      seen_start=""
      sleep "$WATCH_INTERVAL"
      continue
    fi
    if [[ "$node" != READY ]]; then
      say "tpu: $node (waiting for READY)"
      sleep "$WATCH_INTERVAL"
      continue
    fi
    state="$(run_state || echo unknown)"
    say "tpu: READY  run: $state"
    case "$state" in
      done) echo "run finished"; return 0 ;;
      none) die "nothing was started on $TPU_NAME: use run first" ;;
      failed:*) die "the run failed ($state); see: launch/tpu_pod.sh logs" ;;
      partial) cmd_stop || cmd_kill ;;
      stopped-early|killed)
        resumes=$((resumes + 1))
        [[ $resumes -le $MAX_RESUMES ]] || die "MAX_RESUMES=$MAX_RESUMES reached"
        cmd_resume || say "resume refused; trying again at the next poll"
        seen_start="" ;;
      running)
        read -r _ _ started stepnum _ < <(worker 0 progress 2>/dev/null | grep '^ptm-progress: ' || true)
        now="$(date +%s)"
        if [[ "${started:-}" != "$seen_start" || "${stepnum:-}" != "$seen_step" ]]; then
          seen_start="${started:-}" seen_step="${stepnum:-}" changed_at="$now"
        fi
        limit="$HANG_SECONDS"
        [[ "${stepnum:--}" == "-" ]] && limit="$HANG_STARTUP_SECONDS"
        idle=$((now - changed_at))
        if (( idle >= limit )); then
          say "hang: no new step for $idle s (last step: ${stepnum:--}; limit $limit s): collecting stacks, stopping"
          worker all stacks 2>&1 | sed -n 's/^ptm-stacks: /  stacks: /p'
          sleep "${STACKS_WAIT:-5}"  # faulthandler writes as soon as python runs its signal handler
          cmd_stop || cmd_kill
          seen_start=""
          continue  # the next poll sees stopped-early or killed and resumes
        fi ;;
    esac
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
