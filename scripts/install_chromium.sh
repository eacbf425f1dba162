#!/bin/sh
# Installs Debian's headless-capable `chromium` for tests/report/test_html_browser.py (idempotent).
# Runs as root, or through sudo when it is available; does nothing when chromium is already on PATH.
set -eu

if command -v chromium >/dev/null 2>&1; then
    echo "chromium already installed: $(command -v chromium)"
    exit 0
fi

if [ "$(id -u)" -eq 0 ]; then
    SUDO=""
elif command -v sudo >/dev/null 2>&1; then
    SUDO="sudo"
else
    echo "install_chromium.sh: run as root (apt-get needs it), or install sudo" >&2
    exit 1
fi

export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update
$SUDO apt-get install -y chromium
command -v chromium
