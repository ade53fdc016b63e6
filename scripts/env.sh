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
# The local stack's config lives in this copy of Pulumi.local.yaml, outside the repository: its API
# key and passphrase salt never land there, the tracked file stays as committed, and what the user
# sets with `scripts/pulumi.sh config set … -s local` stays set (sync_local_config).
GLM_LOCAL_CONFIG=$GLM_STATE_DIR/Pulumi.local.yaml
# The stacks whose config lives in such a copy: the local stack, and the same on the project's own
# one-node Kubernetes (make up STACK=local-k8s, scripts/k8s/up.sh).
LOCAL_STACKS=" local local-k8s "
local_stack() { [[ $LOCAL_STACKS == *" $1 "* ]]; }
user_config() { printf '%s\n' "$GLM_STATE_DIR/Pulumi.$1.yaml"; }

say() { echo "glm53: $*" >&2; }

# ensure_packages COMMAND=PACKAGE…: install the Debian packages of missing commands (as root with
# apt), else stop at once naming them. A /path (a glob) instead of a command: a file the package has.
ensure_packages() {
  local pair want missing=()
  for pair in "$@"; do
    want=${pair%%=*}
    if [[ $want == /* ]]; then
      compgen -G "$want" >/dev/null || missing+=("${pair#*=}")
    else
      command -v "$want" >/dev/null || missing+=("${pair#*=}")
    fi
  done
  ((${#missing[@]})) || return 0
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    say "installing ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null &&
      DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null &&
      return 0
  fi
  say "missing packages: sudo apt-get install ${missing[*]}"
  return 1
}
# What `make up` needs; what `make test` needs on top (real nginx with the usage meter's Lua,
# promtool, stand-in SSH hosts, a headless browser).
UP_PACKAGES=(dockerd=docker.io debootstrap=debootstrap python3=python3-venv openssl=openssl)
TEST_PACKAGES=(nginx=nginx /usr/lib/nginx/modules/ngx_http_lua_module.so=libnginx-mod-http-lua
  "/usr/lib/*/lua/5.1/cjson.so=lua-cjson" promtool=prometheus sshd=openssh-server ssh=openssh-client ip=iproute2 nsenter=util-linux shellcheck=shellcheck chromium=chromium)

ensure_passphrase() {
  mkdir -p "$GLM_STATE_DIR/state"
  if [ -z "${PULUMI_CONFIG_PASSPHRASE:-}" ] && [ -z "${PULUMI_CONFIG_PASSPHRASE_FILE:-}" ]; then
    if [ ! -s "$GLM_STATE_DIR/passphrase" ]; then
      (umask 077 && python3 -c 'import secrets; print(secrets.token_urlsafe(32))' >"$GLM_STATE_DIR/passphrase")
      say "new secrets passphrase in $GLM_STATE_DIR/passphrase (keep it: it decrypts the stacks' secrets)"
    fi
    export PULUMI_CONFIG_PASSPHRASE_FILE="$GLM_STATE_DIR/passphrase"
  fi
}

ensure_venv() {
  local stamp="$GLM_ROOT/.venv/.requirements.sha256" want
  want=$(cat "$GLM_ROOT/requirements.txt" "$GLM_ROOT/requirements-dev.txt" "$GLM_ROOT/policy/requirements.txt" | sha256sum | cut -c1-64)
  [ -x "$GLM_ROOT/.venv/bin/python" ] || { say "creating .venv"; python3 -m venv "$GLM_ROOT/.venv"; }
  if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    say "installing Python requirements"
    "$GLM_ROOT/.venv/bin/pip" install -q --disable-pip-version-check -r "$GLM_ROOT/requirements-dev.txt" >&2
    echo "$want" >"$stamp"
  fi
  export PATH="$GLM_ROOT/.venv/bin:$PATH"
}

ensure_docker() {
  docker info >/dev/null 2>&1 && return 0
  if [ "$(id -u)" = 0 ] && command -v dockerd >/dev/null; then
    say "starting dockerd (log: /var/log/glm53-dockerd.log)"
    # Seen on these machines: dockerd needs --iptables=false; networks and -p publishing still work.
    setsid nohup dockerd --iptables=false >/var/log/glm53-dockerd.log 2>&1 </dev/null &
    for _ in $(seq 60); do docker info >/dev/null 2>&1 && return 0; sleep 1; done
  fi
  say "no Docker engine answers: start dockerd (sudo dockerd, or systemctl start docker)"
  return 1
}

# The CLI and language host on PATH, the providers in Pulumi's plugin cache (scripts/engine.sh).
ensure_engine() {
  local out status=0
  out=$("$GLM_ROOT/scripts/engine.sh") || status=$?
  [ -n "$out" ] && export PATH="$(tail -n 1 <<<"$out"):$PATH"
  [ "$status" = 0 ] || say "the Pulumi engine is incomplete (docs/engine-build.md)"
  return "$status"
}

ensure_local_images() { "$GLM_ROOT/offline/images.sh"; }

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

# The user's copy of Pulumi.local.yaml, where the local stack's config lives: what the user set is
# kept, the repository's later changes are merged in key by key (scripts/local_config.py).
sync_local_config() {
  local stack=${1:-local}
  python3 "$GLM_ROOT/scripts/local_config.py" "$GLM_ROOT/Pulumi.$stack.yaml" "$(user_config "$stack")"
}

# ensure_stack STACK: select it, creating it on first use (a new user never needs `stack init`).
ensure_stack() {
  local tracked
  local_stack "$1" && sync_local_config "$1"
  pulumi stack select "$1" >/dev/null 2>&1 && return 0
  say "creating stack $1 in $PULUMI_BACKEND_URL"
  local_stack "$1" || { pulumi stack init "$1" >/dev/null; return; }
  # `stack init` writes the passphrase salt into the tracked file: move it to the user's copy.
  tracked=$(cat "$GLM_ROOT/Pulumi.$1.yaml")
  pulumi stack init "$1" >/dev/null
  sync_local_config "$1"
  printf '%s\n' "$tracked" >"$GLM_ROOT/Pulumi.$1.yaml"
}

# A local stack's API key (ensure_local_key [STACK], local by default): generated once into the
# user's copy of its config.
ensure_local_key() {
  local stack=${1:-local}
  pulumi config get --path 'glm:apiKeys.local' -s "$stack" --config-file "$(user_config "$stack")" >/dev/null 2>&1 && return 0
  say "generating the $stack stack's API key"
  python3 -c 'import secrets; print("sk-local-" + secrets.token_hex(20))' |
    pulumi config set --secret --path 'glm:apiKeys.local' -s "$stack" --config-file "$(user_config "$stack")" >/dev/null
}

# running_args VERB STACK [ARG…]: what `pulumi up`/`preview` of STACK must add to see what runs, one
# argument a line (ops/running.py): a container of the stack that is stopped, gone or unhealthy is
# said on stderr and replaced (in an up, a gone one refreshed out of the state first), and the gate
# re-run. ARG…: what else addresses the stack (the local stack's --config-file).
running_args() {
  local verb=$1 stack=$2
  shift 2
  python -m ops.running "$verb" <(pulumi stack export -s "$stack" 2>/dev/null) -s "$stack" "$@"
}

# Everything the local stack (and the tests that run its parts) needs on this machine.
ensure_local_prerequisites() {
  ensure_packages "${UP_PACKAGES[@]}"
  ensure_venv
  ensure_docker
  ensure_engine
  ensure_local_images
  ensure_local_weights
  ensure_passphrase
}
