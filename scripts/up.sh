#!/usr/bin/env bash
# From a fresh machine to a passing smoke gate on the local stack (the embedded default).
set -euo pipefail
source "$(dirname "$0")/env.sh"
cd "$GLM_ROOT"
ensure_local_prerequisites
ensure_stack local
ensure_local_key
pulumi up --yes --skip-preview -s local --config-file "$GLM_LOCAL_CONFIG"
cat <<MSG

The local stack answers at $(pulumi stack output endpoint -s local) (the smoke gate passed).
  export GLM_API_KEY="\$($GLM_ROOT/scripts/pulumi.sh config get --path glm:apiKeys.local -s local)"
  $(pulumi stack output curl -s local)
MSG
