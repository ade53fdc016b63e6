# Everyday environment, sourced by scripts/up.sh, scripts/test.sh and scripts/pulumi.sh.
# Each ensure_* step is idempotent and quick when its work is already done.
# shellcheck shell=bash

GLM_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export GLM_STATE_DIR=${GLM_STATE_DIR:-$HOME/.local/share/glm53}
export PULUMI_BACKEND_URL=${PULUMI_BACKEND_URL:-file://$GLM_STATE_DIR/state}
export PULUMI_SKIP_UPDATE_CHECK=true
export PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION=true
# The weights folder the local stack mounts (a tiny fixture: the simulator reads no weights).
GLM_LOCAL_WEIGHTS=/var/lib/glm53-local/models/GLM-5.3-Flash-sim

say() { echo "glm53: $*" >&2; }

ensure_passphrase() {
  if [ -z "${PULUMI_CONFIG_PASSPHRASE:-}" ] && [ -z "${PULUMI_CONFIG_PASSPHRASE_FILE:-}" ]; then
    mkdir -p "$GLM_STATE_DIR/state"
    if [ ! -s "$GLM_STATE_DIR/passphrase" ]; then
      (umask 077 && python3 -c 'import secrets; print(secrets.token_urlsafe(32))' >"$GLM_STATE_DIR/passphrase")
      say "new secrets passphrase in $GLM_STATE_DIR/passphrase (keep it: it decrypts the stack's secrets)"
    fi
    export PULUMI_CONFIG_PASSPHRASE_FILE="$GLM_STATE_DIR/passphrase"
  fi
  mkdir -p "$GLM_STATE_DIR/state"
}

ensure_venv() {
  local stamp="$GLM_ROOT/.venv/.requirements.sha256" want
  want=$(cat "$GLM_ROOT/requirements.txt" "$GLM_ROOT/requirements-dev.txt" | sha256sum | cut -c1-64)
  if [ ! -x "$GLM_ROOT/.venv/bin/python" ]; then
    say "creating .venv"
    python3 -m venv "$GLM_ROOT/.venv"
  fi
  if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    say "installing Python requirements"
    "$GLM_ROOT/.venv/bin/pip" install -q --disable-pip-version-check -r "$GLM_ROOT/requirements-dev.txt" >&2
    echo "$want" >"$stamp"
  fi
  export PATH="$GLM_ROOT/.venv/bin:$PATH"
  # The Go-built language host (v3.79) no longer receives Pulumi.yaml's `virtualenv:` from the
  # 3.274 CLI: name the interpreter explicitly. The dynamic provider imports `components`.
  export PULUMI_PYTHON_CMD="$GLM_ROOT/.venv/bin/python"
  export PYTHONPATH="$GLM_ROOT${PYTHONPATH:+:$PYTHONPATH}"
}

ensure_docker() {
  docker info >/dev/null 2>&1 && return 0
  if [ "$(id -u)" = 0 ] && command -v dockerd >/dev/null; then
    say "starting dockerd (log: /var/log/glm53-dockerd.log)"
    # Seen on these machines: dockerd needs --iptables=false; networks and -p publishing still work.
    setsid nohup dockerd --iptables=false >/var/log/glm53-dockerd.log 2>&1 </dev/null &
    for _ in $(seq 60); do docker info >/dev/null 2>&1 && return 0; sleep 1; done
  fi
  say "no Docker engine answers: install docker.io and start dockerd"
  return 1
}

# Puts the engine's bin dir on PATH. engine.sh exits 3 when some binaries could not be had (here:
# the docker and command providers, whose modules the Go proxy refuses); that is reported, not
# fatal: what needs them says so (`require_providers`), and the e2e tests skip with the reason.
ensure_engine() {
  local out status=0
  out=$("$GLM_ROOT/scripts/engine.sh") || status=$?
  [ -n "$out" ] && export PATH="$(tail -n 1 <<<"$out"):$PATH"
  case $status in
    0) ;;
    3) say "the Pulumi engine is incomplete: $(missing_engine_binaries | tr '\n' ' ')" ;;
    *) say "scripts/engine.sh failed ($status)"; return "$status" ;;
  esac
}

missing_engine_binaries() {
  local b
  for b in pulumi pulumi-language-python pulumi-resource-docker pulumi-resource-command; do
    command -v "$b" >/dev/null || echo "$b"
  done
}

require_providers() {
  local missing
  missing=$(missing_engine_binaries)
  [ -z "$missing" ] && return 0
  say "cannot run pulumi here: missing $(echo $missing). On a machine that reaches get.pulumi.com,"
  say "scripts/engine.sh installs them (pulumi plugin install resource docker 4.11.0 / command 1.2.1);"
  say "here the Go module proxy refuses their modules (docs/engine-build.md)."
  return 3
}

ensure_local_images() {
  "$GLM_ROOT/scripts/offline-images.sh"
}

ensure_local_weights() {
  [ -f "$GLM_LOCAL_WEIGHTS/model.safetensors.index.json" ] && return 0
  say "writing the simulator's weights fixture in $GLM_LOCAL_WEIGHTS"
  mkdir -p "$GLM_LOCAL_WEIGHTS"
  cat >"$GLM_LOCAL_WEIGHTS/config.json" <<'JSON'
{"_comment": "fixture for the vLLM-protocol simulator: not a model", "model_type": "glm-sim", "max_position_embeddings": 131072}
JSON
  cat >"$GLM_LOCAL_WEIGHTS/model.safetensors.index.json" <<'JSON'
{"metadata": {"total_size": 8}, "weight_map": {"lm_head.weight": "model-00001-of-00001.safetensors"}}
JSON
  printf '\0\0\0\0\0\0\0\0' >"$GLM_LOCAL_WEIGHTS/model-00001-of-00001.safetensors"
}

# The local stack's API key: generated once into the stack's encrypted config.
ensure_local_key() {
  if ! pulumi config get --path 'glm:apiKeys.local' -s local >/dev/null 2>&1; then
    say "generating the local stack's API key (pulumi config get --path glm:apiKeys.local -s local)"
    python3 -c 'import secrets; print("sk-local-" + secrets.token_hex(20))' \
      | pulumi config set --secret --path 'glm:apiKeys.local' -s local >/dev/null
  fi
}

ensure_stack() {
  local stack=$1
  pulumi stack select "$stack" >/dev/null 2>&1 || pulumi stack init "$stack" >/dev/null
}

# Everything the local stack (and the tests that run its parts) needs on this machine.
ensure_local_prerequisites() {
  ensure_venv
  ensure_docker
  ensure_engine
  ensure_local_images
  ensure_local_weights
  ensure_passphrase
}
