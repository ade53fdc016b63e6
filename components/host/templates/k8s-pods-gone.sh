# shellcheck shell=sh
# shellcheck disable=SC1083,SC2086 # placeholders components/template.py fills; KUBECTL is argv, split on purpose
# Run by `pulumi destroy` after the stack's Deployments are deleted (components/kubernetes/teardown.py):
# returns once no pod of the stack is left, printing what it waits for, or fails after WAIT_SECONDS
# naming the pods and the command to watch them. Every value is quoted for the shell. These
# comments are not sent.
KUBECTL={{KUBECTL}}
SELECTOR={{SELECTOR}}
SERVING={{SERVING}}
WAIT_SECONDS={{WAIT_SECONDS}}
WATCH={{WATCH}}
if ! command -v kubectl >/dev/null 2>&1; then
  echo "kubectl is not on PATH: destroy does not wait for the stack's pods to stop. Watch them go: $WATCH" >&2
  exit 0
fi
if stamp=$($KUBECTL get deployment "$SERVING" -o 'jsonpath={.metadata.deletionTimestamp}' 2>/dev/null) && [ -z "$stamp" ]; then
  echo "deployment/$SERVING still stands (this is a replacement, not a destroy): nothing to wait for"
  exit 0
fi
deadline=$(( $(date +%s) + WAIT_SECONDS ))
while :; do
  if ! left=$($KUBECTL get pods -l "$SELECTOR" -o name 2>/dev/null); then
    echo "kubectl could not list the stack's pods: not waiting for them. Watch them go: $WATCH" >&2
    exit 0
  fi
  if [ -z "$left" ]; then
    echo "every pod of the stack has stopped"
    exit 0
  fi
  if [ "$(date +%s)" -ge "$deadline" ]; then
    echo "still running $WAIT_SECONDS s after their Deployments were deleted: $(echo $left). Watch them: $WATCH" >&2
    exit 1
  fi
  echo "waiting for the stack's pods to stop: $(echo $left)"
  sleep 2
done
