#!/usr/bin/env bash
# `make test`'s tests, arranged for a 2-core machine, where CI's wall time is the longest of two lanes:
#  - The oldest and tfx profiles' virtualenvs install in the background (pip is mostly network and disk), one after
#    the other, into one log.
#  - Lane 1, in the foreground: the suite but the engines' tier, its output live.
#  - Lane 2, in the background: the engines' tier (tests/flink and tests/cluster: JVMs that start, Flink's restart
#    delays and heartbeats, SDK harnesses that connect; mostly waiting).
#  - Then each lane takes the profiles' tests that the other has not taken, one at a time, each once its virtualenv
#    is installed. The engines' tier ends well before the rest, so lane 2 usually runs both profiles while lane 1
#    is still busy: no core waits for a part that could already run.
#    Each pytest process is its own session: its own temporary folders, its own Flink job server or test bed, its
#    own junit XML (test-results/junit.xml, junit-engines.xml, junit-<profile>.xml).
#  PARITY_TEST_TIERS=one runs the whole suite in lane 1 instead (junit.xml), and lane 2 only takes profiles.
# Every background part's output is printed whole at the end, in a fixed order, so that outputs do not interleave;
# lane 2 runs in a session of its own, ended with the script if it stops early.
# Exit: the first non-zero exit of a part in that order (pytest's 5, "no tests", fails too).
#
# Environment: PARITY_VENV (the main virtualenv, default .venv), PARITY_TEST_TIERS (two | one, default two).
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PYTHON="${PARITY_VENV:-.venv}/bin/python"
RESULTS="$ROOT/test-results"
LANES="$RESULTS/lanes"  # claims and exit codes the lanes share
ENGINES=(tests/flink tests/cluster)
PROFILES=(oldest tfx)
log() { echo "run_tests: $*" >&2; }
since() { echo "$(( $(date +%s) - $1 )) s"; }

TIERS="${PARITY_TEST_TIERS:-two}"
case "$TIERS" in one|two) ;; *) log "PARITY_TEST_TIERS=$TIERS: expected two or one"; exit 2 ;; esac
mkdir -p "$RESULTS"
rm -rf "$LANES"
mkdir -p "$LANES"
export ROOT PYTHON RESULTS LANES

# A part's exit code goes to $LANES/<name>.rc, so that either lane (or the end of this script) can read it.
part() {
  local name="$1"
  shift
  "$@"
  echo $? >"$LANES/$name.rc"
}
# Takes each profile no lane has claimed yet (mkdir is the atomic claim), waits for its install, runs its tests.
take_profiles() {
  local lane="$1" profile
  for profile in "${PROFILES[@]}"; do
    mkdir "$LANES/claim-$profile" 2>/dev/null || continue
    until [ -f "$LANES/install-$profile.rc" ]; do sleep 2; done
    if [ "$(cat "$LANES/install-$profile.rc")" -ne 0 ]; then
      echo "the $profile profile's virtualenv did not install: see the installs' log" >"$RESULTS/profile-$profile.log"
      echo 2 >"$LANES/profile-$profile.rc"
      continue
    fi
    echo "run_tests: lane $lane runs the $profile profile" >&2
    part "profile-$profile" bash scripts/test_profile.sh "$profile" run >"$RESULTS/profile-$profile.log" 2>&1
  done
}
PROFILES_TEXT="${PROFILES[*]}"
export PROFILES_TEXT
export -f part take_profiles

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

setsid bash -c 'for p in $PROFILES_TEXT; do part "install-$p" bash scripts/test_profile.sh "$p" install; done' \
  >"$RESULTS/profiles-install.log" 2>&1 &
background+=("$!")

started=$(date +%s)
if [ "$TIERS" = two ]; then
  setsid bash -c 'PROFILES=($PROFILES_TEXT)
    part engines "$PYTHON" -m pytest -q -p no:cacheprovider --junitxml="$RESULTS/junit-engines.xml" "$@" \
      >"$RESULTS/engines.log" 2>&1
    take_profiles 2' lane2 "${ENGINES[@]}" &
  lane2=$!
  background+=("$lane2")
  ignored=()
  for path in "${ENGINES[@]}"; do ignored+=(--ignore="$path"); done
  part suite "$PYTHON" -m pytest -q -p no:cacheprovider --junitxml="$RESULTS/junit.xml" "${ignored[@]}" tests
  log "the suite but the engines' tier: ended after $(since "$started")"
else
  setsid bash -c 'PROFILES=($PROFILES_TEXT); take_profiles 2' &
  lane2=$!
  background+=("$lane2")
  part suite "$PYTHON" -m pytest -q -p no:cacheprovider --junitxml="$RESULTS/junit.xml" tests
  log "the whole suite: ended after $(since "$started")"
fi
take_profiles 1
wait "$lane2"
log "both lanes: ended after $(since "$started")"
background=()  # every part has ended and been waited for

status=0
report() {  # name, title, log file (none for the suite, whose output was live)
  local name="$1" title="$2" logfile="${3:-}" code
  code="$(cat "$LANES/$name.rc" 2>/dev/null || echo 2)"
  if [ -n "$logfile" ]; then
    echo "----- $title (exit $code) -----"
    cat "$logfile" 2>/dev/null
  else
    log "$title: exit $code"
  fi
  [ "$status" -ne 0 ] || status="$code"
}
report suite "the suite$([ "$TIERS" = two ] && echo " but the engines' tier")"
[ "$TIERS" = two ] && report engines "the engines' tier (${ENGINES[*]})" "$RESULTS/engines.log"
for profile in "${PROFILES[@]}"; do
  report "install-$profile" "the $profile profile's install"
  report "profile-$profile" "profile $profile" "$RESULTS/profile-$profile.log"
done
echo "----- the profiles' installs -----"
cat "$RESULTS/profiles-install.log"
exit "$status"
