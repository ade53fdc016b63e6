#!/usr/bin/env bash
# The local stack's status page (docs/front-and-alerts.md "The status page"): it opens only with a
# metrics key (glm:metricsKeys), which the local stack makes once, as it makes its API key.
#
#   scripts/status_page.sh key   generate glm:metricsKeys.local into the user's copy of the local
#                                config, once (scripts/up.sh runs it before `pulumi up`)
#   scripts/status_page.sh url   print the page's address with that key after `#`, ready to open
#                                (a fragment never reaches a server or a log; the page takes it out
#                                of the address and keeps it for the tab)
set -euo pipefail
source "$(dirname "$0")/env.sh"
cd "$GLM_ROOT"
ensure_venv
ensure_engine >/dev/null
ensure_passphrase

# The metrics key's name: `metrics:local` in the front's access log, beside the API key's `local`.
NAME=local

config() { pulumi config "$@" -s local --config-file "$GLM_LOCAL_CONFIG"; }

case ${1:-} in
  key)
    ensure_stack local
    config get --path "glm:metricsKeys.$NAME" >/dev/null 2>&1 && exit 0
    say "generating the local stack's metrics key (the status page's)"
    # Not the API key's prefix: a metrics key reads /metrics and the page, never the model.
    python3 -c 'import secrets; print("sk-metrics-local-" + secrets.token_hex(20))' |
      config set --secret --path "glm:metricsKeys.$NAME" >/dev/null
    ;;
  url)
    endpoint=$(pulumi stack output endpoint -s local)
    key=$(config get --path "glm:metricsKeys.$NAME")
    echo "${endpoint%/v1}/status/#key=$key"
    ;;
  *)
    echo "usage: scripts/status_page.sh key|url" >&2
    exit 2
    ;;
esac
