#!/usr/bin/env bash
# From a fresh machine to a passing smoke gate on the local stack (the embedded default).
set -euo pipefail
source "$(dirname "$0")/env.sh"
cd "$GLM_ROOT"
ensure_local_prerequisites
ensure_stack local
ensure_local_key
scripts/status_page.sh key
# What runs first: a stopped, removed or unhealthy container is brought back through its gate.
mapfile -t seen < <(running_args up local --config-file "$GLM_LOCAL_CONFIG")
# It ends with the outputs a user acts on, or the failure's cause and the next command (ops/ending.py,
# from the engine's event log: `--event-log` exists with PULUMI_DEBUG_COMMANDS, as the Automation API runs it).
events=$(mktemp "${TMPDIR:-/tmp}/glm53-events.XXXXXX")
trap 'rm -f "$events"' EXIT
status=0
PULUMI_DEBUG_COMMANDS=true pulumi up --yes --skip-preview -s local --config-file "$GLM_LOCAL_CONFIG" \
  --suppress-outputs --event-log "$events" "${seen[@]}" || status=$?
python -m ops.ending local "$status" "$events" || true
[ "$status" = 0 ] || exit "$status"
# "Answers" only after asking it, now; an up that changed nothing the gate checks did not run it:
# say so, and when it last passed.
GLM_API_KEY=$(pulumi config get --path glm:apiKeys.local -s local --config-file "$GLM_LOCAL_CONFIG") \
  python scripts/gate_note.py <(pulumi stack history --json -s local) <(pulumi stack export -s local) \
  <(pulumi stack output --json -s local) local
# The status page, with the local stack's own metrics key (scripts/status_page.sh made it above).
printf '  The status page: %s\n' "$(scripts/status_page.sh url)"
