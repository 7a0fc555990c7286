#!/usr/bin/env bash
# The worker side of launch/tpu_pod.sh: tpu_pod.sh copies this checkout to every TPU VM worker (host) and runs
#   bash ~/$REMOTE_DIR/launch/tpu_worker.sh <install|check|start|state|progress|stacks|stop|kill>
# there through `gcloud compute tpus tpu-vm ssh --worker=...`. Everything lives under ~/ptm-logs:
#   ptm.cmd      the ptm command line (shell-quoted), saved by `tpu_pod.sh run`, started again by `resume`
#   ptm.env      the env file (tpu_pod.sh's PTM_ENV_FILE), sourced before python starts
#   ptm.pid      "<python's pid> <boot id>": the process `stop` signals (a pid from before a reboot is ignored)
#   ptm.lock     held (flock) by the supervisor and python for as long as the run lives: "is one running?"
#   ptm.exit     python's exit status, written when it ends (absent while it runs or after a reboot)
#   ptm.started  epoch seconds of the last start; ptm.log: python's output, appended
# Settings come from tpu_pod.sh: REMOTE_DIR, VENV (under the home unless absolute), PYTHON_VERSION, PTM_LOCK.
# Before every start, processes that hold the TPU's device files (TPU_DEVICE_FILES) are killed and libtpu's lock
# file (LIBTPU_LOCKFILE) is removed: a process left by an earlier run keeps the chips, and a stale lock file makes
# libtpu refuse to start ("TPU is already in use" / "The TPU is already in use by process ...").
set -uo pipefail

LOGS="$HOME/ptm-logs"
REMOTE_DIR="${REMOTE_DIR:-ptm_jax}"
VENV="${VENV:-ptm-venv}"
[[ "$VENV" == /* ]] || VENV="$HOME/$VENV"
PY="$VENV/bin/python"
PYTHON_VERSION="${PYTHON_VERSION:-3.11}"
PTM_LOCK="${PTM_LOCK:-requirements/tpu.lock}"  # relative to the checkout
TPU_DEVICE_FILES="${TPU_DEVICE_FILES:-/dev/accel* /dev/vfio/[0-9]*}"  # v2-v4: /dev/accelN; v5e, v5p, v6e: vfio
LIBTPU_LOCKFILE="${LIBTPU_LOCKFILE:-/tmp/libtpu_lockfile}"
MIN_PYTHON="3.11"  # tomllib, and the JAX releases ptm_jax is tested with
HOST="${HOSTNAME:-$(uname -n)}"

fail() { echo "$HOST: $2" >&2; exit "$1"; }

# Exit 0 when the interpreter $1 is Python >= MIN_PYTHON; otherwise says what it found.
python_ok() {
  local version
  version="$("$1" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)" || {
    echo "$HOST: $1 does not run" >&2
    return 1
  }
  if [[ "$(printf '%s\n%s\n' "$MIN_PYTHON" "$version" | sort -V | head -n 1)" != "$MIN_PYTHON" ]]; then
    echo "$HOST: $1 is Python $version; ptm_jax needs Python >= $MIN_PYTHON" >&2
    return 1
  fi
}

# A Python >= 3.11 environment at $VENV with exactly the versions of the lock file (launch/install_env.sh: uv
# makes the environment, fetching a standalone CPython build when the image has none, and syncs it to the lock).
cmd_install() {
  bash "$HOME/$REMOTE_DIR/launch/install_env.sh" "$HOME/$REMOTE_DIR/$PTM_LOCK" "$VENV" "$PYTHON_VERSION" ||
    fail 2 "cannot install the environment of $PTM_LOCK at $VENV (see the messages above)"
  python_ok "$PY" || fail 2 "set PYTHON_VERSION to $MIN_PYTHON or later and run setup again"
  "$PY" -c 'import sys, jax
print(sys.version.split()[0], jax.__version__, jax.process_index(), jax.device_count(), jax.devices()[0])'
}

boot_id() { cat /proc/sys/kernel/random/boot_id 2>/dev/null || echo unknown; }

# Python's pid when it is alive: same boot, and the pid still runs ptm (a pid file that survived a reboot, or a
# pid reused by another program, names nothing).
live_pid() {
  local pid boot
  [[ -f "$LOGS/ptm.pid" ]] || return 1
  read -r pid boot < "$LOGS/ptm.pid" || return 1
  [[ "$boot" == "$(boot_id)" ]] && kill -0 "$pid" 2>/dev/null || return 1
  tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -q -- "-m ptm_jax.cli" || return 1
  echo "$pid"
}

# Exit 0 while a run lives on this worker (its supervisor or its python holds the lock; a reboot releases it).
running() {
  [[ -f "$LOGS/ptm.lock" ]] || return 1
  ! flock -n "$LOGS/ptm.lock" true
}

# One line for tpu_pod.sh: "ptm-state: running|exited:<status>|killed|none <host> ..."
cmd_state() {
  if running; then
    echo "ptm-state: running $HOST pid $(live_pid || echo '?'): $(tail -n 1 "$LOGS/ptm.log" | cut -c1-160)"
  elif [[ -f "$LOGS/ptm.exit" ]]; then
    echo "ptm-state: exited:$(cat "$LOGS/ptm.exit") $HOST"
  elif [[ -f "$LOGS/ptm.started" ]]; then
    echo "ptm-state: killed $HOST (no exit status: rebooted or killed)"
  else
    echo "ptm-state: none $HOST"
  fi
}

# Exit 2 (with the reason) when this worker cannot start ptm: no Python >= 3.11 environment or no checkout.
cmd_check() {
  python_ok "$PY" || fail 2 "no Python >= $MIN_PYTHON environment at $VENV: run launch/tpu_pod.sh setup"
  [[ -d "$HOME/$REMOTE_DIR" ]] || fail 2 "no checkout at ~/$REMOTE_DIR: run launch/tpu_pod.sh setup"
}

# Pids of the processes that hold one of the TPU's device files open (read from /proc; through sudo -n when it
# needs no password, as on a TPU VM, so that other users' processes are seen too).
device_holders() {
  local files=() f
  for f in $TPU_DEVICE_FILES; do
    [[ -e "$f" ]] && files+=("$(readlink -f "$f")")
  done
  (( ${#files[@]} )) || return 0
  local scan='for fd in /proc/[0-9]*/fd/*; do t="$(readlink "$fd" 2>/dev/null)" || continue
    for f in "$@"; do [[ "$t" == "$f" ]] && { p="${fd#/proc/}"; echo "${p%%/*}"; }; done; done | sort -un'
  if [[ "$(id -u)" != 0 ]] && sudo -n true 2>/dev/null; then
    sudo -n bash -c "$scan" _ "${files[@]}"
  else
    bash -c "$scan" _ "${files[@]}"
  fi
}

# Before a start: kill what still holds the chips (a process of an earlier run that outlived it) and remove
# libtpu's lock file, each with one line in the log. Runs only when no run of ours lives here (start holds ptm.lock).
clear_stale() {
  local pid what
  for pid in $(device_holders); do
    [[ "$pid" == "$$" ]] && continue
    what="$(tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | cut -c1-120 | sed 's/ *$//')"
    if kill -KILL "$pid" 2>/dev/null || sudo -n kill -KILL "$pid" 2>/dev/null; then
      echo "=== $(date -u '+%F %T') cleared: killed stale process $pid ($what), which held the TPU" |
        tee -a "$LOGS/ptm.log"
    else
      fail 3 "process $pid ($what) holds the TPU and cannot be killed here: sudo kill -9 $pid"
    fi
  done
  if [[ -e "$LIBTPU_LOCKFILE" ]]; then
    rm -f "$LIBTPU_LOCKFILE" 2>/dev/null || sudo -n rm -f "$LIBTPU_LOCKFILE" 2>/dev/null ||
      fail 3 "cannot remove libtpu's lock file $LIBTPU_LOCKFILE: sudo rm -f $LIBTPU_LOCKFILE"
    echo "=== $(date -u '+%F %T') cleared: removed libtpu's lock file $LIBTPU_LOCKFILE" | tee -a "$LOGS/ptm.log"
  fi
}

# Starts the saved command detached (a dropped ssh session does not stop it). Refuses while one runs here.
cmd_start() {
  mkdir -p "$LOGS"
  [[ -f "$LOGS/ptm.cmd" ]] || fail 1 "no saved command: use run first"
  cmd_check
  exec 9>>"$LOGS/ptm.lock"
  flock -n 9 || fail 3 "a ptm run is already running here (pid $(live_pid || echo '?')); stop it first"
  clear_stale
  rm -f "$LOGS/ptm.exit" "$LOGS/ptm.pid"
  date +%s > "$LOGS/ptm.started"
  echo "=== $(date -u '+%F %T') start: ptm $(cat "$LOGS/ptm.cmd")" >> "$LOGS/ptm.log"
  # the supervisor and python inherit fd 9, so the lock stays held until both have ended
  nohup setsid bash "${BASH_SOURCE[0]}" supervise >> "$LOGS/ptm.log" 2>&1 < /dev/null &
  exec 9>&-
  local pid="" i
  for ((i = 0; i < 100; i++)); do
    pid="$(live_pid)" && break
    [[ -f "$LOGS/ptm.exit" ]] && fail 1 "ptm ended at once with status $(cat "$LOGS/ptm.exit"); see ~/ptm-logs/ptm.log"
    sleep 0.1
  done
  echo "$HOST: started pid ${pid:-?}: ptm $(cat "$LOGS/ptm.cmd")"
}

# Runs python as a child (its own pid goes to ptm.pid, so signals reach it), then writes its exit status.
cmd_supervise() {
  cd "$HOME/$REMOTE_DIR" || exit 1
  if [[ -f "$LOGS/ptm.env" ]]; then
    set -a  # plain VAR=value lines are exported too
    # shellcheck disable=SC1091
    source "$LOGS/ptm.env"
    set +a
  fi
  # local copies of gs:// files (tokenizer, token cache): a folder that survives a reboot, so a resumed run
  # does not download the whole cache again (/tmp is emptied by a maintenance reboot)
  export PTM_LOCAL_SCRATCH="${PTM_LOCAL_SCRATCH:-$HOME/ptm-scratch}"
  mkdir -p "$PTM_LOCAL_SCRATCH"
  local pid status=0
  eval "set -- $(cat "$LOGS/ptm.cmd")"
  trap 'kill -TERM "$pid" 2>/dev/null' TERM INT HUP
  "$PY" -m ptm_jax.cli "$@" &
  pid=$!
  echo "$pid $(boot_id)" > "$LOGS/ptm.pid.tmp" && mv "$LOGS/ptm.pid.tmp" "$LOGS/ptm.pid"
  while kill -0 "$pid" 2>/dev/null; do
    wait "$pid"
    status=$?  # a trapped signal interrupts wait; the loop waits again until python has ended
  done
  echo "$status" > "$LOGS/ptm.exit.tmp" && mv "$LOGS/ptm.exit.tmp" "$LOGS/ptm.exit"
  local cpu
  times > "$LOGS/ptm.times"  # this shell's own line, then its children's (python's) user and system CPU time
  cpu="$(tail -n 1 "$LOGS/ptm.times")"
  rm -f "$LOGS/ptm.times"
  echo "=== $(date -u '+%F %T') exit status $status (python's CPU time: user ${cpu% *}, system ${cpu#* })"
}

# One line for tpu_pod.sh's hang check: "ptm-progress: <host> <epoch of the last start> <last step logged since
# that start, or -> <seconds since the log last changed>". Step lines come from process 0 (worker 0).
cmd_progress() {
  local started step age
  started="$(cat "$LOGS/ptm.started" 2>/dev/null || echo -)"
  step="$(awk '/^=== .* start: /{s="-"} /^step [0-9]+\//{split($2, a, "/"); s=a[1]} END{print s == "" ? "-" : s}' \
    "$LOGS/ptm.log" 2>/dev/null || echo -)"
  age=$(( $(date +%s) - $(stat -c %Y "$LOGS/ptm.log" 2>/dev/null || date +%s) ))
  echo "ptm-progress: $HOST $started ${step:--} $age"
}

# Python's stacks into ptm.log: SIGUSR1 makes ptm's faulthandler write every thread's stack (ptm registers it at
# start-up); py-spy, when installed, adds the native frames of a process that cannot run its handler.
cmd_stacks() {
  local pid spy
  pid="$(live_pid)" || { echo "ptm-stacks: $HOST no live ptm process"; return 0; }
  echo "=== $(date -u '+%F %T') stacks of pid $pid (requested by tpu_pod.sh):" >> "$LOGS/ptm.log"
  spy="$(command -v py-spy || true)"
  [[ -z "$spy" && -x "$VENV/bin/py-spy" ]] && spy="$VENV/bin/py-spy"  # requirements/tpu.lock installs it
  if [[ -n "$spy" ]]; then  # ptrace: Ubuntu allows it to root only (kernel.yama.ptrace_scope=1)
    "$spy" dump --native --pid "$pid" >> "$LOGS/ptm.log" 2>&1 ||
      sudo -n "$spy" dump --native --pid "$pid" >> "$LOGS/ptm.log" 2>&1 || true
  fi
  kill -USR1 "$pid" 2>/dev/null || true
  echo "ptm-stacks: $HOST pid $pid: faulthandler stacks requested (SIGUSR1)${spy:+, py-spy dump written}"
}

# SIGTERM to python (as a preemption would: ptm checkpoints at the next step and exits 0), then SIGCONT (as
# systemd does: a stopped process acts on neither until it runs), then waits up to $1 s for it to end. Prints
# "ptm-stop: <host> <what happened>"; exit 1 when it still runs.
cmd_stop() {
  local wait_s="${1:-300}" pid t0
  pid="$(live_pid)" || pid=""
  if [[ -n "$pid" ]]; then
    kill -TERM "$pid" 2>/dev/null || true
    kill -CONT "$pid" 2>/dev/null || true
  elif ! running; then
    echo "ptm-stop: $HOST not running (last exit status: $(cat "$LOGS/ptm.exit" 2>/dev/null || echo none))"
    return 0
  fi
  t0="$(date +%s)"
  while running; do
    if (( $(date +%s) - t0 >= wait_s )); then
      echo "ptm-stop: $HOST still running after ${wait_s} s (pid ${pid:-?})"
      return 1
    fi
    sleep 1
  done
  echo "ptm-stop: $HOST exited $(cat "$LOGS/ptm.exit" 2>/dev/null || echo '?') after $(( $(date +%s) - t0 )) s"
}

# SIGKILL to python (a process that outlived the others, stuck in a collective).
cmd_kill() {
  local pid
  if pid="$(live_pid)"; then
    kill -KILL "$pid" 2>/dev/null || true
    echo "ptm-kill: $HOST killed pid $pid"
  fi
}

case "${1:-}" in
  install) cmd_install ;;
  check) cmd_check ;;
  start) cmd_start ;;
  supervise) cmd_supervise ;;
  state) cmd_state ;;
  progress) cmd_progress ;;
  stacks) cmd_stacks ;;
  stop) cmd_stop "${2:-300}" ;;
  kill) cmd_kill ;;
  *) sed -n '2,15p' "${BASH_SOURCE[0]}" >&2; exit 2 ;;
esac
