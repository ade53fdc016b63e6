#!/usr/bin/env bash
# `make destroy STACK=local-k8s`: the stack off the one-node cluster. The namespace, the JIT cache's
# claim and volume (with its files under /var/lib/glm53-local/k8s-jit-cache) stay, as the weights do;
# the cluster keeps running if it was (make k8s-stop stops it, leaving nothing). A cluster that was
# stopped is started for the destroy (its objects went with it; the stack's state goes now) and
# stopped again.
set -euo pipefail
source "$(dirname "$0")/../env.sh"
cd "$GLM_ROOT"
bin=$(scripts/k8s/build.sh --check) || { say "the one-node cluster is not built (make k8s-build)"; exit 3; }
# kubectl alone on PATH: destroy waits for the stack's pods with it (components/kubernetes/teardown.py).
mkdir -p "$GLM_STATE_DIR/k8s-bin" && ln -sfn "$bin/kubectl" "$GLM_STATE_DIR/k8s-bin/kubectl"
export PATH="$GLM_STATE_DIR/k8s-bin:$PATH"
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
