#!/usr/bin/env bash
# All of parity's set-up, inside the repo: a virtualenv with parity and its test tools, and the Flink job server.
# Idempotent: a second run checks a stamp and returns in seconds.
#
# Environment:
#   PARITY_VENV=DIR           the virtualenv to create or reuse (default: .venv in the repo; relative = to the repo)
#   PARITY_PYTHON=EXE         the interpreter that creates it (default: python3; must be 3.11 or newer)
#   PARITY_SKIP_FLINK_JAR=1   do not fetch the Flink job server (scripts/fetch_flink_jar.sh)
#   PARITY_FORCE_INSTALL=1    run pip even when the stamp says the venv is up to date
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${PARITY_VENV:-.venv}"
case "$VENV" in /*) ;; *) VENV="$ROOT/$VENV" ;; esac
PYTHON="${PARITY_PYTHON:-python3}"

log() { echo "setup: $*" >&2; }
die() { log "error: $*"; exit 1; }

export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1

started=$(date +%s)

# 1. The virtualenv.
if [ ! -x "$VENV/bin/python" ]; then
  command -v "$PYTHON" >/dev/null 2>&1 || die "$PYTHON not found; install Python 3.11 (Debian: apt-get install python3 python3-venv)"
  "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
    || die "$PYTHON is $("$PYTHON" -V 2>&1); parity needs Python 3.11 or newer (set PARITY_PYTHON)"
  log "creating $VENV with $("$PYTHON" -V 2>&1)"
  "$PYTHON" -m venv "$VENV" || die "python3 -m venv failed (Debian: apt-get install python3-venv)"
fi
PY="$VENV/bin/python"
"$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' || die "$VENV holds $("$PY" -V 2>&1); remove it and rerun"

# 2. parity and its dependencies at the tested pins (constraints.txt), skipped when nothing that decides them
# changed since the last install: setup.py, constraints.txt, and the C canonical encoder's sources, which the
# editable install compiles into parity/ (a changed source needs a rebuild; parity.encoding.canonical ignores a build of
# another encoding version and falls back to Python).
stamp="$VENV/.parity-setup-stamp"
want="$("$PY" - "$ROOT/setup.py" "$ROOT/constraints.txt" "$ROOT/parity/encoding/_canonical.c" "$ROOT/vendor/xxhash/xxhash.h" <<'PY'
import hashlib, sys
digest = hashlib.sha256()
for path in sys.argv[1:]:
    digest.update(open(path, "rb").read())
print(digest.hexdigest(), sys.version.split()[0], sys.argv[1])
PY
)"
native_built() { compgen -G "$ROOT/parity/encoding/_canonical*.so" >/dev/null; }
if [ "${PARITY_FORCE_INSTALL:-0}" != "1" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] \
   && [ -x "$VENV/bin/parity" ] && native_built; then
  log "dependencies up to date in $VENV (stamp matches setup.py, constraints.txt and the C encoder's sources)"
else
  log "installing parity and its dependencies into $VENV (first time: several minutes)"
  "$PY" -m pip install -q --upgrade pip
  "$PY" -m pip install -q -c "$ROOT/constraints.txt" -e "$ROOT[test]"
  "$PY" -m pip check >&2 || log "warning: pip check reports conflicts (above)"
  native_built || log "warning: the C canonical encoder (parity/encoding/_canonical.c) did not build (no C compiler or" \
    "Python headers?); parity runs on its pure Python encoder: same fingerprints, much slower"
  echo "$want" >"$stamp"
  log "installed in $(( $(date +%s) - started )) s"
fi

# 3. The Flink job server, fetched through Maven into vendor/jars/.
if [ "${PARITY_SKIP_FLINK_JAR:-0}" = "1" ]; then
  log "PARITY_SKIP_FLINK_JAR=1: not fetching the Flink job server"
else
  jar="$("$ROOT/scripts/fetch_flink_jar.sh" | tail -n 1)"
  log "Flink job server: $jar"
fi

log "ready: $VENV (parity: $VENV/bin/parity) in $(( $(date +%s) - started )) s"
