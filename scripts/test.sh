#!/usr/bin/env bash
# Everything the tests need on a fresh machine, then lint, type check and the whole suite
# (unit, mocks, real nginx/promtool, simulator, and the end-to-end tests on the real engine).
set -euo pipefail
source "$(dirname "$0")/env.sh"
cd "$GLM_ROOT"
ensure_packages "${TEST_PACKAGES[@]}"
ensure_local_prerequisites || say "continuing: the tests that need what is missing skip with the reason"
make --no-print-directory lint
exec python -m pytest "$@"
