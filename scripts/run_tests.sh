#!/usr/bin/env bash
# `make test`'s tests, arranged for a 2-core machine, where CI's wall time is the sum of what waits:
#  1. The oldest and tfx profiles' virtualenvs install in the background (pip is mostly network and disk), one after
#     the other, into one log.
#  2. The suite in two pytest processes side by side: the engines' tier (tests/flink and tests/cluster: JVMs that
#     start, Flink's restart delays and heartbeats, SDK harnesses that connect; mostly waiting) in the background,
#     and the rest in the foreground. Each is its own session: its own temporary folders, its own Flink job server
#     or test bed, its own junit XML (test-results/junit-engines.xml, test-results/junit.xml).
#     PARITY_TEST_TIERS=one runs the whole suite in one process instead (junit.xml only).
#  3. The two profiles' tests side by side, each into its own log.
# Every background part's output is printed whole when it has ended, so that outputs do not interleave; each runs
# in a session of its own, ended with the script if it stops early.
# Exit: the first non-zero exit of a part (pytest's 5, "no tests", fails too).
#
# Environment: PARITY_VENV (the main virtualenv, default .venv), PARITY_TEST_TIERS (two | one, default two).
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PYTHON="${PARITY_VENV:-.venv}/bin/python"
RESULTS="$ROOT/test-results"
ENGINES=(tests/flink tests/cluster)
mkdir -p "$RESULTS"
log() { echo "run_tests: $*" >&2; }
status=0
keep() { [ "$status" -ne 0 ] || status="$1"; }
pytest() { "$PYTHON" -m pytest -q -p no:cacheprovider "$@"; }
# waits for a background part, prints its log under a header and keeps its exit code
collect() {
  local name="$1" pid="$2" logfile="$3" code
  wait "$pid"
  code=$?
  echo "----- $name (exit $code) -----"
  cat "$logfile"
  keep "$code"
  return "$code"
}
since() { echo "$(( $(date +%s) - $1 )) s"; }

TIERS="${PARITY_TEST_TIERS:-two}"
case "$TIERS" in one|two) ;; *) log "PARITY_TEST_TIERS=$TIERS: expected two or one"; exit 2 ;; esac

# Each background part runs in a session of its own (setsid): a stop of this script (Ctrl-C, CI's cancel) ends
# the whole of it, pytest's Flink JVMs and worker pools and pip included, not only this shell.
background=()
stop_background() {
  local pid
  for pid in "${background[@]}"; do kill -TERM -- "-$pid" 2>/dev/null; done
}
trap stop_background EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

setsid bash -c 'bash scripts/test_profile.sh oldest install && bash scripts/test_profile.sh tfx install' \
  >"$RESULTS/profiles-install.log" 2>&1 &
installs=$!
background+=("$installs")

started=$(date +%s)
case "$TIERS" in
  one)
    pytest --junitxml="$RESULTS/junit.xml" tests
    keep $?
    ;;
  two)
    setsid "$PYTHON" -m pytest -q -p no:cacheprovider --junitxml="$RESULTS/junit-engines.xml" "${ENGINES[@]}" \
      >"$RESULTS/engines.log" 2>&1 &
    engines=$!
    background+=("$engines")
    ignored=()
    for path in "${ENGINES[@]}"; do ignored+=(--ignore="$path"); done
    pytest --junitxml="$RESULTS/junit.xml" "${ignored[@]}" tests
    keep $?
    log "the suite but the engines' tier: ended after $(since "$started")"
    collect "the engines' tier (${ENGINES[*]})" "$engines" "$RESULTS/engines.log"
    ;;
esac
log "main suite: ended after $(since "$started")"

if ! collect "the profiles' installs" "$installs" "$RESULTS/profiles-install.log"; then
  log "the profiles' virtualenvs did not install: see above"
  exit "$status"
fi

started=$(date +%s)
declare -A runs
for profile in oldest tfx; do
  setsid bash scripts/test_profile.sh "$profile" run >"$RESULTS/profile-$profile.log" 2>&1 &
  runs[$profile]=$!
  background+=("${runs[$profile]}")
done
for profile in oldest tfx; do
  collect "profile $profile" "${runs[$profile]}" "$RESULTS/profile-$profile.log"
done
log "profiles: both ended after $(since "$started")"
background=()  # every part has ended and been waited for
exit "$status"
