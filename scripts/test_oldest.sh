#!/usr/bin/env bash
# The oldest supported combination (constraints-oldest.txt: apache-beam 2.59, tensorflow-transform 1.16 with
# tensorflow 2.16, tfx-bsl 1.16, pyarrow 10) in a virtualenv of its own, and the tests that must hold there: the
# canonical golden vectors, the golden reports (byte for byte: the same fingerprints as with the newest pins), the
# scenarios (TFX ones included), TFMD schemas and the production taps. `make test` runs it after the main suite.
# Idempotent: a second run checks a stamp and skips the install.
#
# Environment: PARITY_OLDEST_VENV=DIR (default .venv-oldest in the repo), PARITY_PYTHON=EXE (default python3).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${PARITY_OLDEST_VENV:-$ROOT/.venv-oldest}"
PYTHON="${PARITY_PYTHON:-python3}"
log() { echo "test_oldest: $*" >&2; }
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1

[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
stamp="$VENV/.parity-oldest-stamp"
want="$(cat "$ROOT/setup.py" "$ROOT/constraints-oldest.txt" | sha256sum | cut -d' ' -f1)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  log "the oldest combination is installed in $VENV (stamp matches)"
else
  started=$(date +%s)
  log "installing the oldest supported combination into $VENV (a few minutes)"
  "$VENV/bin/python" -m pip install -q --upgrade pip
  # parity itself, not editable: pip checks that setup.py's ranges accept the oldest pins
  "$VENV/bin/python" -m pip install -q -c "$ROOT/constraints-oldest.txt" "$ROOT[test]"
  "$VENV/bin/python" -m pip check >&2 || log "warning: pip check reports conflicts (above)"
  echo "$want" >"$stamp"
  log "installed in $(( $(date +%s) - started )) s"
fi

cd "$ROOT"
mkdir -p test-results
# pytest.ini puts the repository first on sys.path: the tests run this checkout's parity on the oldest libraries
"$VENV/bin/python" -m pytest -q -p no:cacheprovider -W ignore::FutureWarning \
  --junitxml=test-results/junit-oldest.xml \
  tests/test_canonical_vectors.py tests/report/test_golden.py tests/test_scenarios.py tests/test_tfmd.py \
  tests/test_beam_taps.py tests/test_tap_compat.py
