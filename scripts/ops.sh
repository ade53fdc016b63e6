#!/usr/bin/env bash
# Day-2 operations on a deployed stack (ops/__main__.py): logs, status, smoke, restart, debug.
#   scripts/ops.sh status -s a800
set -euo pipefail
source "$(dirname "$0")/env.sh"
cd "$GLM_ROOT"
ensure_venv
ensure_engine
ensure_passphrase
exec python -m ops "$@"
