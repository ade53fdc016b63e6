#!/usr/bin/env bash
# From a fresh machine to a passing smoke gate on the local stack (the embedded default).
set -euo pipefail
source "$(dirname "$0")/env.sh"
cd "$GLM_ROOT"
ensure_local_prerequisites
ensure_stack local
ensure_local_key
scripts/status_page.sh key
pulumi up --yes --skip-preview -s local --config-file "$GLM_LOCAL_CONFIG"
# An up that changed nothing the gate checks did not run it: say so, and when it last passed.
gate="$(python scripts/gate_note.py <(pulumi stack history --json -s local) <(pulumi stack export -s local))"
cat <<MSG

The local stack answers at $(pulumi stack output endpoint -s local) ($gate).
  export GLM_API_KEY="\$($GLM_ROOT/scripts/pulumi.sh config get --path glm:apiKeys.local -s local)"
  $(pulumi stack output curl -s local)
MSG
