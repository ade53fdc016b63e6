#!/usr/bin/env bash
# From a fresh machine to a passing smoke gate on the local stack (the embedded default).
set -euo pipefail
source "$(dirname "$0")/env.sh"
cd "$GLM_ROOT"
ensure_venv
ensure_engine
require_providers # before the slow steps: say at once what cannot work here
ensure_local_prerequisites
ensure_stack local
ensure_local_key
pulumi up --yes --skip-preview -s local
endpoint=$(pulumi stack output endpoint -s local)
cat <<MSG

The local stack answers at $endpoint (the smoke gate passed).
  export GLM_API_KEY="\$(PULUMI_CONFIG_PASSPHRASE_FILE=$PULUMI_CONFIG_PASSPHRASE_FILE PULUMI_BACKEND_URL=$PULUMI_BACKEND_URL pulumi config get --path glm:apiKeys.local -s local)"
  $(pulumi stack output curl -s local)
MSG
