#!/usr/bin/env bash
# A standalone Flink session cluster on localhost (one JobManager + one or more TaskManagers, 2 slots each, small
# memory, a fixed-delay restart strategy),
# for submitting parity replays to a real cluster: `--runner FlinkRunner -- --flink_master=localhost:8081`.
#
#   scripts/flink_cluster.sh install   only install Flink (idempotent)
#   scripts/flink_cluster.sh start     install if needed, start, wait until the REST API answers (idempotent)
#   scripts/flink_cluster.sh status    exit 0 and print the overview if the cluster answers, else exit 3
#   scripts/flink_cluster.sh stop      stop both processes (idempotent)
#   scripts/flink_cluster.sh add-taskmanager  start one more TaskManager on a running cluster (e.g. in place of
#                                      a killed one; the caller waits for it to register)
#
# status, stop and add-taskmanager first take out of the TaskManagers' pid file every pid under which no
# TaskManager runs any more (one killed, or exited), and say so: flink-daemon.sh would otherwise keep it, and
# `stop` would signal that number, which another process may have by then.
#
# Flink comes from PyPI: `apache-flink` (bin/ and conf/) and `apache-flink-libraries` (lib/, opt/, plugins/;
# an sdist of about 200 MB) of the same version, installed --no-deps into a separate venv (they pin an older
# apache-beam than parity's). Together, site-packages/pyflink is a FLINK_HOME. The Flink minor must equal the job
# server's (vendor/jars/flink-job-server.properties: 1.19). Configuration, logs and pid files live under
# $PARITY_FLINK_VENV/cluster/, never in the installed package.
#
# Environment:
#   PARITY_FLINK_VENV=DIR              the venv (default: .flink-venv in the repo; gitignored)
#   PARITY_FLINK_CLUSTER_VERSION=X.Y.Z the Flink release (default 1.19.3, the newest 1.19 on PyPI)
#   PARITY_FLINK_REST_PORT=N           the REST port (default 8081)
#   PARITY_FLINK_CLUSTER_TIMEOUT=S     seconds `start` waits for the REST API and every slot (default 180)
#   PARITY_FLINK_TASKMANAGERS=N        how many TaskManagers (default 1; the cluster test bed starts 2)
#   PARITY_FLINK_SLOTS=N               task slots per TaskManager (default 2)
#   PARITY_FLINK_TM_MEMORY=SIZE        taskmanager.memory.process.size (default 2048m)
#   PARITY_FLINK_RPC_PORT=N            the JobManager's RPC port (default 6123; two clusters need two)
#   PARITY_FLINK_RESTART_ATTEMPTS=N    fixed-delay restart strategy: attempts (default 3), 2 s apart
#   PARITY_FLINK_FAILOVER_STRATEGY=S   jobmanager.execution.failover-strategy (default full, Flink's is region):
#                                      a failed task restarts the whole job, so that no task of it keeps the
#                                      TaskManager's cached SDK environment (a dead harness) alive (docs/flink.md)
#   PARITY_FLINK_HEARTBEAT_INTERVAL=MS heartbeat.interval (default 10000, Flink's)
#   PARITY_FLINK_HEARTBEAT_TIMEOUT=MS  heartbeat.timeout (default 50000, Flink's): how soon a lost TaskManager
#                                      is noticed (also after heartbeat.rpc-failure-threshold, 2, failed heartbeats)
#   PARITY_FLINK_RUN_DIR=DIR           configuration, logs and pid files (default: \$PARITY_FLINK_VENV/cluster)
#   PARITY_PYTHON=EXE                  the interpreter that creates the venv (default python3)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${PARITY_FLINK_VENV:-.flink-venv}"
case "$VENV" in /*) ;; *) VENV="$ROOT/$VENV" ;; esac
VERSION="${PARITY_FLINK_CLUSTER_VERSION:-1.19.3}"
PORT="${PARITY_FLINK_REST_PORT:-8081}"
TIMEOUT="${PARITY_FLINK_CLUSTER_TIMEOUT:-180}"
PYTHON="${PARITY_PYTHON:-python3}"
RUN_DIR="${PARITY_FLINK_RUN_DIR:-$VENV/cluster}"
TASKMANAGERS="${PARITY_FLINK_TASKMANAGERS:-1}"
SLOTS="${PARITY_FLINK_SLOTS:-2}"
TM_MEMORY="${PARITY_FLINK_TM_MEMORY:-2048m}"
RPC_PORT="${PARITY_FLINK_RPC_PORT:-6123}"
RESTART_ATTEMPTS="${PARITY_FLINK_RESTART_ATTEMPTS:-3}"
FAILOVER_STRATEGY="${PARITY_FLINK_FAILOVER_STRATEGY:-full}"
HEARTBEAT_INTERVAL="${PARITY_FLINK_HEARTBEAT_INTERVAL:-10000}"
HEARTBEAT_TIMEOUT="${PARITY_FLINK_HEARTBEAT_TIMEOUT:-50000}"

log() { echo "flink_cluster: $*" >&2; }
die() { log "error: $*"; exit 1; }

flink_home() {
  "$VENV/bin/python" - <<'PY'
import importlib.util, os
spec = importlib.util.find_spec("pyflink")
print(os.path.dirname(spec.origin) if spec and spec.origin else "")
PY
}

install() {
  local stamp="$VENV/.parity-flink-stamp" started
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$VERSION" ] && [ -d "$(flink_home)/lib" ]; then
    return 0
  fi
  command -v java >/dev/null 2>&1 || die "java is not on PATH; install a JDK 17 (Debian: apt-get install openjdk-17-jdk-headless)"
  started=$(date +%s)
  if [ ! -x "$VENV/bin/python" ]; then
    command -v "$PYTHON" >/dev/null 2>&1 || die "$PYTHON not found"
    "$PYTHON" -m venv "$VENV" || die "$PYTHON -m venv failed (Debian: apt-get install python3-venv)"
  fi
  log "installing Flink $VERSION from PyPI into $VENV (apache-flink-libraries is about 200 MB)"
  PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 "$VENV/bin/python" -m pip install -q --no-deps \
    "apache-flink==$VERSION" "apache-flink-libraries==$VERSION" \
    || die "pip could not install apache-flink==$VERSION and apache-flink-libraries==$VERSION"
  local home
  home="$(flink_home)"
  [ -d "$home/lib" ] && [ -d "$home/bin" ] || die "no lib/ or bin/ under $home after the install"
  ls "$home"/lib/flink-dist*.jar >/dev/null 2>&1 || die "no flink-dist jar under $home/lib"
  chmod +x "$home"/bin/*
  echo "$VERSION" >"$stamp"
  log "installed Flink $VERSION in $(( $(date +%s) - started )) s: FLINK_HOME=$home"
}

# A copy of conf/ with localhost binds, 2 slots and small memory: the installed package stays untouched. Every
# TaskManager of this host reads the same file (their RPC and data ports are chosen free at start).
configure() {
  local home="$1" conf="$RUN_DIR/conf"
  mkdir -p "$RUN_DIR/log" "$RUN_DIR/pid" "$RUN_DIR/tmp"
  rm -rf "$conf"
  cp -r "$home/conf" "$conf"
  # The JVM options of the shipped config (--add-opens/--add-exports that Java 17 needs) are kept.
  local java_opts
  java_opts="$(sed -n 's/^ *all: *//p' "$home/conf/config.yaml" | head -n 1)"
  rm -f "$conf/config.yaml" "$conf/flink-conf.yaml"
  # Flink 1.19 reads conf/config.yaml (standard YAML; flat keys are accepted).
  cat >"$conf/config.yaml" <<EOF
# Written by scripts/flink_cluster.sh: a small local session cluster.
env.java.opts.all: "$java_opts"
jobmanager.rpc.address: localhost
jobmanager.rpc.port: $RPC_PORT
jobmanager.bind-host: localhost
taskmanager.bind-host: localhost
taskmanager.host: localhost
rest.address: localhost
rest.bind-address: localhost
rest.port: $PORT
taskmanager.numberOfTaskSlots: $SLOTS
parallelism.default: 1
jobmanager.memory.process.size: 1024m
taskmanager.memory.process.size: $TM_MEMORY
# A failed task (an SDK worker or a TaskManager killed) restarts the job from its start, a few times.
restart-strategy.type: fixed-delay
restart-strategy.fixed-delay.attempts: $RESTART_ATTEMPTS
restart-strategy.fixed-delay.delay: 2 s
# Beam's Flink runner keeps a job's SDK environments (the harness connections) per TaskManager for as long as any
# task of the job there holds them, and never checks that a harness is alive. With Flink's region failover, tasks
# of other regions hold them while the failed region restarts, and the restarted tasks get the dead harness again
# ("CANCELLED: call already cancelled" at newBundle) until the attempts run out. A full restart releases them.
jobmanager.execution.failover-strategy: $FAILOVER_STRATEGY
heartbeat.interval: $HEARTBEAT_INTERVAL
heartbeat.timeout: $HEARTBEAT_TIMEOUT
# A Beam pipeline translates to ~100 Flink tasks chained in one slot (the taxi example's offline side): the
# default network memory (10% of 1.7 GB) leaves too few buffers ("Insufficient number of network buffers").
taskmanager.memory.network.min: 256m
taskmanager.memory.network.max: 256m
# Beam's gRPC channels to the SDK harnesses buffer each element in direct memory (Netty), a replay batch of
# several MB at a time. Flink leaves them only its 128 MB of framework off-heap memory by default: a 200,000-record
# replay into S3 (10,000-record batches) failed every attempt with "OutOfMemoryError: Direct buffer memory" in a
# TaskManager, which the job's other tasks report as "call is closed".
taskmanager.memory.task.off-heap.size: 256m
# Managed memory (Flink's sorts) would otherwise take 40% of the rest, leaving the JVM heap under 200 MB.
taskmanager.memory.managed.size: 384m
io.tmp.dirs: $RUN_DIR/tmp
env.pid.dir: $RUN_DIR/pid
env.log.dir: $RUN_DIR/log
EOF
}

overview() { curl -fsS --max-time 5 "http://localhost:$PORT/overview" 2>/dev/null; }

# A TaskManager's pid stays in flink-daemon.sh's pid file after the process died (SIGKILL, out of memory): keep
# only the pids under which a TaskManager (TaskManagerRunner) still runs.
prune_taskmanagers() {
  local file pid kept
  for file in "$RUN_DIR"/pid/*taskexecutor*.pid; do
    [ -f "$file" ] || continue
    kept=""
    while read -r pid; do
      [ -n "$pid" ] || continue
      if [ -d /proc/self ]; then
        if grep -qa TaskManagerRunner "/proc/$pid/cmdline" 2>/dev/null; then kept+="$pid"$'\n'; continue; fi
      elif kill -0 "$pid" 2>/dev/null; then
        kept+="$pid"$'\n'; continue
      fi
      log "removed TaskManager pid $pid from $file: no TaskManager runs under it any more (killed, or exited)"
    done <"$file"
    printf '%s' "$kept" >"$file"
  done
}

status() {
  local body
  prune_taskmanagers
  if body="$(overview)"; then
    echo "$body"
    return 0
  fi
  log "no Flink cluster answers at http://localhost:$PORT"
  return 3
}

flink_env() {  # the environment bin/*.sh run with
  export FLINK_HOME="$1" FLINK_CONF_DIR="$RUN_DIR/conf" FLINK_LOG_DIR="$RUN_DIR/log" FLINK_PID_DIR="$RUN_DIR/pid"
}

start() {
  install
  local home body started
  home="$(flink_home)"
  if body="$(overview)"; then
    log "already running at http://localhost:$PORT"
    echo "$body"
    return 0
  fi
  configure "$home"
  flink_env "$home"
  started=$(date +%s)
  "$home/bin/jobmanager.sh" start >&2
  local n want=$(( TASKMANAGERS * SLOTS ))
  for n in $(seq 1 "$TASKMANAGERS"); do
    "$home/bin/taskmanager.sh" start >&2
  done
  while :; do
    # Ready when every TaskManager has registered its slots.
    if body="$(overview)" && [[ "$body" =~ \"slots-total\":([0-9]+) ]] && [ "${BASH_REMATCH[1]}" -ge "$want" ]; then
      log "running at http://localhost:$PORT after $(( $(date +%s) - started )) s (logs: $RUN_DIR/log)"
      echo "$body"
      return 0
    fi
    if [ $(( $(date +%s) - started )) -ge "$TIMEOUT" ]; then
      log "error: the cluster did not answer with $want TaskManager slots within $TIMEOUT s; logs in $RUN_DIR/log:"
      tail -n 20 "$RUN_DIR"/log/*.log >&2 2>/dev/null || true
      stop
      exit 1
    fi
    sleep 1
  done
}

stop() {
  [ -x "$VENV/bin/python" ] || { log "not installed: nothing to stop"; return 0; }
  local home
  home="$(flink_home)"
  [ -n "$home" ] && [ -d "$RUN_DIR/conf" ] || { log "never started: nothing to stop"; return 0; }
  flink_env "$home"
  prune_taskmanagers
  "$home/bin/taskmanager.sh" stop-all >&2 || true
  "$home/bin/jobmanager.sh" stop >&2 || true
  for _ in $(seq 1 30); do
    overview >/dev/null || { log "stopped"; return 0; }
    sleep 1
  done
  log "warning: http://localhost:$PORT still answers 30 s after stop"
  return 1
}

add_taskmanager() {
  local home
  home="$(flink_home)"
  [ -n "$home" ] && [ -d "$RUN_DIR/conf" ] || die "no cluster was started with $RUN_DIR"
  overview >/dev/null || die "no Flink cluster answers at http://localhost:$PORT"
  flink_env "$home"
  prune_taskmanagers
  "$home/bin/taskmanager.sh" start >&2
}

case "${1:-}" in
  install) install; log "FLINK_HOME=$(flink_home)" ;;
  start) start ;;
  stop) stop ;;
  status) status ;;
  add-taskmanager) add_taskmanager ;;
  *) echo "usage: $0 install|start|stop|status|add-taskmanager" >&2; exit 2 ;;
esac
