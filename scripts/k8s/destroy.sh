#!/usr/bin/env bash
# `make destroy STACK=local-k8s`: the stack off the one-node cluster. The namespace, the JIT cache's
# claim and volume (with its files under /var/lib/glm53-local/k8s-jit-cache) stay, as the weights do;
# the cluster keeps running if it was (make k8s-stop stops it, leaving nothing). A cluster that was
# stopped is started for the destroy (its objects went with it; the stack's state goes now) and
# stopped again.
set -euo pipefail
source "$(dirname "$0")/../env.sh"
cd "$GLM_ROOT"
scripts/k8s/build.sh --check >/dev/null || { say "the one-node cluster is not built (make k8s-build)"; exit 3; }
started=
if ! scripts/k8s/cluster.sh status >/dev/null 2>&1; then
  scripts/k8s/cluster.sh start >/dev/null
  started=1
fi
status=0
scripts/pulumi.sh destroy --yes -s local-k8s || status=$?
if [ -n "$started" ]; then
  scripts/k8s/cluster.sh stop
else
  say "the one-node cluster still runs (make k8s-stop stops it, leaving nothing behind)"
fi
exit "$status"
