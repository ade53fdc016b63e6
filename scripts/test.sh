#!/usr/bin/env bash
# Everything the tests need on a fresh machine, then lint, type check and the whole suite
# (unit, mocks, real nginx/promtool, simulator, and the end-to-end tests on the real engine).
set -euo pipefail
source "$(dirname "$0")/env.sh"
cd "$GLM_ROOT"
ensure_local_prerequisites
say "ruff"
ruff check .
ruff format --check .
say "mypy"
mypy
say "pytest"
exec python -m pytest "$@"
