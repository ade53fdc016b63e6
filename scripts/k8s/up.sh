#!/usr/bin/env bash
# `make up STACK=local-k8s`: the local stack on the project's own one-node Kubernetes, from nothing
# to an answer, as `make up` is on Docker (scripts/up.sh): the cluster started if it is not running
# (its binaries must be built once: make k8s-build), the images built on this machine's Docker and
# imported into the node, `up` through the smoke gate, then 13×17 asked once more through the front;
# it ends with the endpoint, the line that puts the key in $GLM_API_KEY and a curl to paste.
set -euo pipefail
source "$(dirname "$0")/../env.sh"
cd "$GLM_ROOT"
stack=local-k8s
config=$(user_config "$stack")
ensure_local_prerequisites # the local images, the weights fixture under /var/lib/glm53-local, the engine
if ! bin=$(scripts/k8s/build.sh --check 2>/dev/null); then
  say "the one-node cluster is not built: $(scripts/k8s/build.sh --check 2>&1 | tail -1 | sed 's/^k8s-build: //')"
  say "build it once with: make k8s-build (~15 min on an idle machine, 45 min measured under load), then make up STACK=$stack again"
  exit 3
fi
scripts/k8s/build.sh >/dev/null # the Kubernetes provider into Pulumi's plugin cache (a second once done)
# kubectl alone on PATH (the cluster's preflight and the roll's watch read with it): the whole bin
# folder would also put its pulumi-resource-kubernetes there, and the engine warns on every run.
mkdir -p "$GLM_STATE_DIR/k8s-bin" && ln -sfn "$bin/kubectl" "$GLM_STATE_DIR/k8s-bin/kubectl"
export PATH="$GLM_STATE_DIR/k8s-bin:$PATH"
if ! scripts/k8s/cluster.sh status >/dev/null 2>&1; then
  say "starting the one-node cluster (scripts/k8s/cluster.sh start, ~15 s; make k8s-stop stops it)"
  scripts/k8s/cluster.sh start >/dev/null
fi
ensure_stack "$stack"
ensure_local_key "$stack"
events=$(mktemp "${TMPDIR:-/tmp}/glm53-events.XXXXXX")
trap 'rm -f "$events"' EXIT
status=0
PULUMI_DEBUG_COMMANDS=true pulumi up --yes --skip-preview -s "$stack" --config-file "$config" \
  --suppress-outputs --event-log "$events" || status=$?
python -m ops.ending "$stack" "$status" "$events" || true
[ "$status" = 0 ] || exit "$status"
GLM_API_KEY=$(pulumi config get --path glm:apiKeys.local -s "$stack" --config-file "$config") \
  python scripts/gate_note.py <(pulumi stack history --json -s "$stack") <(pulumi stack export -s "$stack") \
  <(pulumi stack output --json -s "$stack") "$stack"
