#!/usr/bin/env bash
# Everything the tests need on a fresh machine, then lint, type check and the whole suite
# (unit, mocks, real nginx/promtool, simulator, and the end-to-end tests on the real engine).
#
#   scripts/test.sh [PYTEST ARGS]   the whole suite (make test), or what the arguments name
#   scripts/test.sh --fast          lint, type check, unit, mocks, the renderers against the real
#                                   nginx and promtool: no container, no engine (make test-fast)
#
# The suite runs on GLM_TEST_WORKERS processes (4): the fast tests first, then the end-to-end
# modules, which mostly wait on containers, side by side, longest first (tests/conftest.py
# SECONDS), each module on one worker (its module fixtures: one stack, one pair of stand-in
# hosts). The ten slowest tests and the total close each phase.
set -euo pipefail
source "$(dirname "$0")/env.sh"
cd "$GLM_ROOT"
workers=(-n "${GLM_TEST_WORKERS:-4}" --dist loadscope --no-loadscope-reorder --durations=10)
if [[ ${1:-} == --fast ]]; then
  shift
  ensure_packages "${TEST_PACKAGES[@]}"
  ensure_venv
  make --no-print-directory lint
  exec python -m pytest "${workers[@]}" -m "not e2e and not containers" "$@"
fi
ensure_packages "${TEST_PACKAGES[@]}"
ensure_local_prerequisites || say "continuing: the tests that need what is missing skip with the reason"
make --no-print-directory lint
if (($#)); then
  exec python -m pytest "${workers[@]}" "$@"
fi
# The whole suite in two phases: the fast tests first, on a quiet machine (their timing checks, such
# as a gate's deadline or a simulator's queue, met a load of 15 beside the end-to-end modules and
# failed there), then the end-to-end and container modules side by side. Both always run.
status=0
python -m pytest "${workers[@]}" -m "not e2e and not containers" || status=$?
python -m pytest "${workers[@]}" -m "e2e or containers" || status=$?
exit "$status"
