#!/usr/bin/env bash
# The pulumi CLI with this project's environment (venv, engine, file backend, passphrase):
#   scripts/pulumi.sh preview --diff -s a800
# The stack named by -s/--stack is created on first use. The local stacks (local, local-k8s) read
# their config from the user's copy of Pulumi.<stack>.yaml (scripts/env.sh), so their key never
# lands in the repository.
set -euo pipefail
source "$(dirname "$0")/env.sh"
cd "$GLM_ROOT"
ensure_venv
ensure_engine
ensure_passphrase

stack=
args=("$@")
for i in "${!args[@]}"; do
  case ${args[$i]} in
    -s | --stack) stack=${args[$((i + 1))]:-} ;;
    -s=* | --stack=*) stack=${args[$i]#*=} ;;
  esac
done
[ -n "$stack" ] && ensure_stack "$stack"
# Only these subcommands read stack config (and accept --config-file).
if [ -n "$stack" ] && local_stack "$stack"; then
  case ${1:-} in up | preview | destroy | refresh | config | import | watch) args+=(--config-file "$(user_config "$stack")") ;; esac
fi
# `up` and `preview` see what runs: the engine compares the program with its state only, so a
# stopped, removed or unhealthy container would look deployed (ops/running.py).
if [ -n "$stack" ]; then
  local_config=()
  local_stack "$stack" && local_config=(--config-file "$(user_config "$stack")")
  case ${1:-} in
    up | preview) mapfile -t seen < <(running_args "$1" "$stack" "${local_config[@]}") && args+=("${seen[@]}") ;;
  esac
fi
# `destroy` runs the program: the serving containers' drain hook (components/docker/drain_hook.py) is
# registered by it, and the engine refuses to delete a resource whose hook it cannot find.
# On a config the program refuses, it registers the hook from the stack's `drain` output instead
# (GLM_DESTROY_DRAIN): the stack is destroyed whatever its file now says.
if [ "${1:-}" = destroy ]; then
  args+=(--run-program)
  GLM_DESTROY_DRAIN=$(pulumi stack output drain --json ${stack:+-s "$stack"} 2>/dev/null) || GLM_DESTROY_DRAIN=null
  export GLM_DESTROY_DRAIN
fi
# `up` ends with the outputs a user acts on, or with the failure's cause and the next command, not
# with every output (ops/ending.py reads the engine's event log). `--json` asked for the engine's own.
# `--event-log` exists where PULUMI_DEBUG_COMMANDS is set, as the Automation API sets it for its events.
events=
if [ "${1:-}" = up ] && [[ " ${args[*]} " != *" --json "* ]]; then
  events=$(mktemp "${TMPDIR:-/tmp}/glm53-events.XXXXXX")
  trap 'rm -f "$events"' EXIT
  args+=(--suppress-outputs --event-log "$events")
  export PULUMI_DEBUG_COMMANDS=true
fi
# `preview --diff` shows what changes, not what stays: the unchanged inputs of a changed dynamic
# resource and the unchanged elements of a changed list or map are left out (ops/preview_display.py).
# GLM_FULL_DIFF=1: the engine's own display. The engine's stderr goes through it too: the gates' and Prometheus' lines
# come there, each followed by a blank line.
compact=
if [ "${1:-}" = preview ] && [[ " ${args[*]} " == *" --diff "* && " ${args[*]} " != *" --json "* ]] && [ -z "${GLM_FULL_DIFF:-}" ]; then
  compact=1
fi
# The SSH commands (preflight, downloads) sign with an SSH agent, never with a key in the state
# (components/docker/target.py). Without an agent of the user's, one lives for this run only, and the
# program adds the stack's identityFile to it.
agent=
if [ -z "${SSH_AUTH_SOCK:-}" ] && command -v ssh-agent >/dev/null; then
  eval "$(ssh-agent -s)" >/dev/null
  export GLM_SSH_AGENT_FOR_RUN=1
  agent=1
fi
# Nothing to do after the engine: it takes this process's place, as it always did.
[ -n "$events$agent$compact" ] || exec pulumi "${args[@]}"
status=0
if [ -n "$compact" ]; then
  pulumi "${args[@]}" 2>&1 | python -m ops.preview_display || status=$?
else
  pulumi "${args[@]}" || status=$?
fi
[ -z "$agent" ] || ssh-agent -k >/dev/null
if [ -n "$events" ]; then
  python -m ops.ending "${stack:-$(pulumi stack --show-name)}" "$status" "$events" || true
fi
exit "$status"
