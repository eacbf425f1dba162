#!/usr/bin/env bash
# A pinned combination other than the newest, in a virtualenv of its own, and the tests that must hold there: the
# canonical golden vectors, the golden reports (byte for byte: the same fingerprints as with the newest pins), the
# scenarios (TFX ones included), TFMD schemas and the production taps. `make test` runs it after the main suite,
# once per profile:
#   oldest  constraints-oldest.txt: apache-beam 2.59, tensorflow-transform 1.16 with tensorflow 2.16, tfx-bsl 1.16,
#           pyarrow 10 (setup.py's lower bounds), in .venv-oldest
#   tfx     constraints-tfx.txt: the pins of a TFX 1.21.0 environment (pyarrow 18, attrs 23, apache-beam 2.78),
#           in .venv-tfx (TFX itself is not installed: its ml-metadata wheel needs glibc 2.39)
# Idempotent: a second run checks a stamp and skips the install. A second argument runs one half: `install` (the
# virtualenv only: scripts/run_tests.sh does it while the main suite runs) or `run` (the tests only, on an installed
# virtualenv); without it, both.
#
# Environment: PARITY_PROFILE_VENV=DIR (default .venv-<profile> in the repo; PARITY_OLDEST_VENV for oldest),
# PARITY_PYTHON=EXE (default python3).
set -euo pipefail

PROFILE="${1:?usage: scripts/test_profile.sh oldest|tfx [install|run]}"
PHASE="${2:-all}"
case "$PHASE" in all|install|run) ;; *) echo "test_profile: unknown phase '$PHASE' (install | run)" >&2; exit 2 ;; esac
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
case "$PROFILE" in
  oldest) CONSTRAINTS="$ROOT/constraints-oldest.txt"; VENV="${PARITY_OLDEST_VENV:-${PARITY_PROFILE_VENV:-$ROOT/.venv-oldest}}" ;;
  tfx) CONSTRAINTS="$ROOT/constraints-tfx.txt"; VENV="${PARITY_PROFILE_VENV:-$ROOT/.venv-tfx}" ;;
  *) echo "test_profile: unknown profile '$PROFILE' (oldest | tfx)" >&2; exit 2 ;;
esac
PYTHON="${PARITY_PYTHON:-python3}"
log() { echo "test_profile($PROFILE): $*" >&2; }
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1

install() {
  [ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
  local stamp="$VENV/.parity-$PROFILE-stamp" want started
  want="$(cat "$ROOT/setup.py" "$CONSTRAINTS" | sha256sum | cut -d' ' -f1)"
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    log "installed in $VENV (stamp matches)"
    return
  fi
  started=$(date +%s)
  log "installing $(basename "$CONSTRAINTS")'s combination into $VENV (a few minutes)"
  "$VENV/bin/python" -m pip install -q --upgrade pip
  # parity itself, not editable: pip checks that setup.py's ranges accept the profile's pins
  "$VENV/bin/python" -m pip install -q -c "$CONSTRAINTS" "$ROOT[test]"
  "$VENV/bin/python" -m pip check >&2 || log "warning: pip check reports conflicts (above)"
  echo "$want" >"$stamp"
  log "installed in $(( $(date +%s) - started )) s"
}

if [ "$PHASE" = run ]; then
  [ -x "$VENV/bin/python" ] || { log "no virtualenv in $VENV: run 'scripts/test_profile.sh $PROFILE install' first"; exit 2; }
else
  install
fi
[ "$PHASE" = install ] && exit 0

cd "$ROOT"
mkdir -p test-results
"$VENV/bin/python" -c 'import apache_beam, pyarrow, attr, tensorflow_transform as t; print("test_profile: apache-beam",
  apache_beam.__version__, "pyarrow", pyarrow.__version__, "attrs", attr.__version__, "tensorflow-transform", t.__version__)' >&2
# pytest.ini puts the repository first on sys.path: the tests run this checkout's parity on the profile's libraries
"$VENV/bin/python" -m pytest -q -p no:cacheprovider -W ignore::FutureWarning \
  --junitxml="test-results/junit-$PROFILE.xml" \
  tests/encoding/test_canonical_vectors.py tests/report/test_golden.py tests/test_scenarios.py \
  tests/capture/test_tfmd.py tests/test_beam_taps.py tests/sets/test_tap_compat.py tests/test_compat.py
