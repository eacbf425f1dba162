#!/usr/bin/env bash
# The oldest supported combination's tier: scripts/test_profile.sh oldest (kept under this name for the docs and
# habits that call it).
exec bash "$(dirname "${BASH_SOURCE[0]}")/test_profile.sh" oldest "$@"
