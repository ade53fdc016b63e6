#!/usr/bin/env bash
# The Pulumi CLI with this project's environment (venv, engine, file backend, passphrase):
#   scripts/pulumi.sh preview -s a800 --diff
set -euo pipefail
source "$(dirname "$0")/env.sh"
cd "$GLM_ROOT"
ensure_venv
ensure_engine
ensure_passphrase
exec pulumi "$@"
