#!/usr/bin/env bash
# Make the Pulumi engine (CLI, Python language host, docker and command providers) available.
#
#   PATH="$(scripts/engine.sh | tail -1):$PATH"
#
# The last line on stdout is the directory that holds the binaries; everything else goes to stderr.
# Order of preference:
#   1. a complete cache:  ${GLM_ENGINE_CACHE:-$HOME/.cache/glm53-engine}/<pulumi-version>/bin
#   2. a `pulumi` already on PATH, or the official installer, plus `pulumi plugin install`
#   3. a Go build from modules fetched by the `go` client (for machines that reach only package
#      registries). Each binary is built only when missing, in a temp dir, and moved into place last,
#      so an interrupted run is simply run again. See docs/engine-build.md for what was verified.
#
# Exit status: 0 when every binary is there; 3 when some could not be had (the bin dir is still
# printed, with whatever could be built); anything else is an unexpected failure.
# Environment: GLM_ENGINE_CACHE (cache root), GLM_ENGINE_SKIP_ONLINE=1 (go straight to the Go build).

# The build functions are called through `step` by name, which shellcheck cannot follow.
# shellcheck disable=SC2317
set -euo pipefail

PULUMI_VERSION=3.274.1
DOCKER_VERSION=4.11.0
COMMAND_VERSION=1.2.1

# Go module coordinates for the fallback build. Pseudo-versions are (commit time UTC)-(commit) of the
# release tags; none of these repositories tags the sub-directory modules themselves.
PULUMI_PKG_MOD=github.com/pulumi/pulumi/pkg/v3
PULUMI_SDK_MOD=github.com/pulumi/pulumi/sdk/v3
# The Python language host has been its own module (sdk/python/cmd/pulumi-language-python/v3)
# since v3.80.0, and the Go module proxy here refuses that module at every version. v3.79.0 is the
# last sdk/v3 release that still carries it inside sdk/v3, which the proxy does serve.
LANGHOST_SDK_VERSION=3.79.0
DOCKER_MOD=github.com/pulumi/pulumi-docker/provider/v4
DOCKER_PSEUDO=v4.0.0-20251224124537-d8e789826ba1            # tag v4.11.0
DOCKER_UPSTREAM_MOD=github.com/kreuzwerker/terraform-provider-docker
DOCKER_UPSTREAM_PSEUDO=v0.0.0-20251109221605-d7d7ff7f8977   # its v3.9.0, the v4.11.0 submodule commit
COMMAND_MOD=github.com/pulumi/pulumi-command/provider
COMMAND_PSEUDO=v0.0.0-20260303235922-7f3eb6f3b77c          # tag v1.2.1

CACHE=${GLM_ENGINE_CACHE:-$HOME/.cache/glm53-engine}
BIN=$CACHE/$PULUMI_VERSION/bin
BINARIES=(pulumi pulumi-language-python pulumi-language-python-exec pulumi-resource-pulumi-python
    pulumi-resource-docker pulumi-resource-command)

export PULUMI_SKIP_UPDATE_CHECK=true

log() { printf 'engine: %s\n' "$*" >&2; }

cache_complete() {
    local b
    for b in "${BINARIES[@]}"; do
        [[ -x $BIN/$b ]] || return 1
    done
    "$BIN/pulumi" version >/dev/null 2>&1
}

finish() { # finish STATUS DIR: print the bin dir as the last stdout line
    printf '%s\n' "$2"
    exit "$1"
}

mkdir -p "$BIN"
if cache_complete; then
    finish 0 "$BIN"
fi

# One run at a time per cache (a second caller waits, then finds the cache complete).
if command -v flock >/dev/null 2>&1; then
    exec 9>"$CACHE/.lock"
    flock 9
    if cache_complete; then
        finish 0 "$BIN"
    fi
fi

# ---------------------------------------------------------------------------------------------
# 2. The ordinary path: an existing CLI or the official installer, plugins from `plugin install`.
# ---------------------------------------------------------------------------------------------
plugins_via_cli() { # plugins_via_cli PULUMI_BINARY
    local cli=$1
    timeout 120 "$cli" plugin install resource docker "$DOCKER_VERSION" >&2 &&
        timeout 120 "$cli" plugin install resource command "$COMMAND_VERSION" >&2
}

# copy_plugins DIR: put the plugins that `pulumi plugin install` fetched next to the CLI in DIR,
# so that the cache check above finds everything next time.
copy_plugins() {
    local plugins=${PULUMI_HOME:-$HOME/.pulumi}/plugins
    cp "$plugins/resource-docker-v$DOCKER_VERSION/pulumi-resource-docker" "$1/" &&
        cp "$plugins/resource-command-v$COMMAND_VERSION/pulumi-resource-command" "$1/"
}

try_online() {
    local cli script
    cli=$(command -v pulumi || true)
    if [[ -n $cli && $(dirname "$cli") != "$BIN" ]]; then
        log "found $cli ($("$cli" version 2>/dev/null || echo '?')); installing plugins"
        if plugins_via_cli "$cli"; then
            [[ -x $(dirname "$cli")/pulumi-language-python ]] ||
                log "warning: no pulumi-language-python next to $cli"
            finish 0 "$(dirname "$cli")"
        fi
        log "plugin install failed with $cli"
    fi
    script=$(mktemp)
    if curl -fsSL --max-time 10 https://get.pulumi.com -o "$script" 2>/dev/null && [[ -s $script ]]; then
        log "running the official installer for v$PULUMI_VERSION into $CACHE/$PULUMI_VERSION"
        # The archive holds pulumi, the language hosts and pulumi-resource-pulumi-python; it lands in $BIN.
        if sh "$script" --version "$PULUMI_VERSION" --install-root "$CACHE/$PULUMI_VERSION" \
            --no-edit-path --silent >&2 && [[ -x $BIN/pulumi ]] &&
            plugins_via_cli "$BIN/pulumi" && copy_plugins "$BIN"; then
            rm -f "$script"
            finish 0 "$BIN"
        fi
        log "official installer or plugin install failed"
    else
        log "get.pulumi.com is not reachable"
    fi
    rm -f "$script"
}

if [[ ${GLM_ENGINE_SKIP_ONLINE:-0} != 1 ]]; then
    try_online
fi

# ---------------------------------------------------------------------------------------------
# 3. The Go build.
# ---------------------------------------------------------------------------------------------
log "falling back to a Go build into $BIN"
GO=$(command -v go || true)
[[ -n $GO ]] || GO=/usr/local/go/bin/go
[[ -x $GO ]] || { log "no go toolchain (looked on PATH and /usr/local/go/bin)"; exit 1; }

export GOMODCACHE=$CACHE/go/mod GOCACHE=$CACHE/go/build
export GOFLAGS="-mod=mod -buildvcs=false" GOWORK=off CGO_ENABLED=0
WORK=$CACHE/work
mkdir -p "$WORK" "$GOMODCACHE" "$GOCACHE"
# Build dirs live under $WORK; we hold the lock, so anything there is left over from an
# interrupted run. Module copies are read-only until chmod'ed, hence the chmod before rm.
clean_work() {
    chmod -R u+w "$WORK" 2>/dev/null || true
    rm -rf "${WORK:?}"/*
}
clean_work
trap clean_work EXIT

new_workdir() { # new_workdir NAME: sets $w to a fresh build dir
    w=$(mktemp -d "$WORK/$1.XXXXXX")
}

# moddir MODULE VERSION: download through the go client, print the module's directory in GOMODCACHE.
moddir() {
    local json dir err
    # Exit status is non-zero on a refusal; the JSON still says why.
    json=$(cd "$WORK" && { "$GO" mod download -json "$1@$2" 2>/dev/null || true; })
    dir=$(sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p' <<<"$json")
    if [[ -z $dir || ! -d $dir ]]; then
        err=$(sed -n 's/^[[:space:]]*"Error": "\(.*\)",\{0,1\}$/\1/p' <<<"$json")
        err=${err//\\n\\t/ }
        log "cannot get $1@$2: ${err:-no answer from go mod download}"
        return 1
    fi
    printf '%s\n' "$dir"
}

# copy_mod SRC DST: a writable copy of a module from GOMODCACHE.
copy_mod() {
    cp -R "$1" "$2" && chmod -R u+w "$2"
}

place() { # place FILE NAME: move a finished binary into the bin dir (rename within one filesystem)
    chmod 0755 "$1"
    mv -f "$1" "$BIN/$2.partial"
    mv -f "$BIN/$2.partial" "$BIN/$2"
}

build_pulumi() {
    local pkg sdk w
    pkg=$(moddir "$PULUMI_PKG_MOD" "v$PULUMI_VERSION") || return 1
    sdk=$(moddir "$PULUMI_SDK_MOD" "v$PULUMI_VERSION") || return 1
    new_workdir pulumi || return 1
    # pkg/go.mod has `replace github.com/pulumi/pulumi/sdk/v3 => ../sdk`.
    copy_mod "$pkg" "$w/pkg" || return 1
    copy_mod "$sdk" "$w/sdk" || return 1
    (cd "$w/pkg" && "$GO" build -trimpath -tags osusergo,grpcnotrace \
        -ldflags "-w -s -X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version=v$PULUMI_VERSION" \
        -o "$w/pulumi" ./cmd/pulumi) || return 1
    place "$w/pulumi" pulumi
}

build_language_python() {
    local sdk w
    sdk=$(moddir "$PULUMI_SDK_MOD" "v$LANGHOST_SDK_VERSION") || return 1
    new_workdir langhost || return 1
    copy_mod "$sdk" "$w/sdk" || return 1
    (cd "$w/sdk" && "$GO" build -trimpath \
        -ldflags "-w -s -X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version=v$LANGHOST_SDK_VERSION" \
        -o "$w/pulumi-language-python" ./python/cmd/pulumi-language-python) || return 1
    place "$w/pulumi-language-python" pulumi-language-python
}

# install_sdk_script PATH NAME: a script from the sdk of the CLI's version. Both run inside the
# program's Python, next to the pulumi package that pip installed, so they follow the CLI's version.
install_sdk_script() {
    local sdk w
    sdk=$(moddir "$PULUMI_SDK_MOD" "v$PULUMI_VERSION") || return 1
    new_workdir script || return 1
    cp "$sdk/$1" "$w/$2" || return 1
    place "$w/$2" "$2"
}
install_python_exec() { install_sdk_script python/cmd/pulumi-language-python-exec pulumi-language-python-exec; }
# The provider that runs `pulumi.dynamic` resources (the official CLI archive ships it too).
install_dynamic_provider() { install_sdk_script python/dist/pulumi-resource-pulumi-python pulumi-resource-pulumi-python; }

build_docker() {
    local prov up w
    prov=$(moddir "$DOCKER_MOD" "$DOCKER_PSEUDO") || return 1
    up=$(moddir "$DOCKER_UPSTREAM_MOD" "$DOCKER_UPSTREAM_PSEUDO") || return 1
    new_workdir docker || return 1
    # provider/go.mod: replace github.com/terraform-providers/terraform-provider-docker => ../upstream
    copy_mod "$prov" "$w/provider" || return 1
    copy_mod "$up" "$w/upstream" || return 1
    # provider/resources.go imports .../terraform-provider-docker/shim, which upstream does not have:
    # expose the provider constructor of the upstream's internal package.
    mkdir -p "$w/upstream/shim" || return 1
    cat >"$w/upstream/shim/shim.go" <<'EOF'
// Package shim lets the Pulumi bridge reach the Terraform provider kept in internal/provider.
// Written by scripts/engine.sh of this project.
package shim

import (
	"github.com/hashicorp/terraform-plugin-sdk/v2/helper/schema"
	"github.com/terraform-providers/terraform-provider-docker/internal/provider"
)

// NewProvider returns the Terraform SDKv2 provider of the upstream module.
func NewProvider() *schema.Provider {
	return provider.New("dev")()
}
EOF
    # main.go embeds schema-embed.json (not in the module): generate it from schema.json.
    (cd "$w/provider" && VERSION=$DOCKER_VERSION "$GO" generate ./cmd/pulumi-resource-docker) || return 1
    (cd "$w/provider" && "$GO" build -trimpath \
        -ldflags "-w -s -X github.com/pulumi/pulumi-docker/provider/v4/pkg/version.Version=$DOCKER_VERSION" \
        -o "$w/pulumi-resource-docker" ./cmd/pulumi-resource-docker) || return 1
    place "$w/pulumi-resource-docker" pulumi-resource-docker
}

build_command() {
    local prov w
    prov=$(moddir "$COMMAND_MOD" "$COMMAND_PSEUDO") || return 1
    new_workdir command || return 1
    copy_mod "$prov" "$w/provider" || return 1
    (cd "$w/provider" && "$GO" build -trimpath \
        -ldflags "-w -s -X github.com/pulumi/pulumi-command/provider/pkg/version.Version=$COMMAND_VERSION" \
        -o "$w/pulumi-resource-command" ./cmd/pulumi-resource-command) || return 1
    place "$w/pulumi-resource-command" pulumi-resource-command
}

missing=()
step() { # step BINARY LABEL FUNCTION
    local bin=$1 label=$2 fn=$3 t0
    if [[ -x $BIN/$bin ]]; then
        return 0
    fi
    log "building $label …"
    t0=$SECONDS
    if "$fn"; then
        log "built $label in $((SECONDS - t0)) s"
    else
        log "FAILED: $label (after $((SECONDS - t0)) s)"
        missing+=("$bin")
    fi
}

step pulumi "pulumi $PULUMI_VERSION" build_pulumi
step pulumi-language-python "pulumi-language-python (sdk/v3 $LANGHOST_SDK_VERSION)" build_language_python
step pulumi-language-python-exec "pulumi-language-python-exec (sdk/v3 $PULUMI_VERSION)" install_python_exec
step pulumi-resource-pulumi-python "pulumi-resource-pulumi-python (sdk/v3 $PULUMI_VERSION)" install_dynamic_provider
step pulumi-resource-docker "pulumi-resource-docker $DOCKER_VERSION" build_docker
step pulumi-resource-command "pulumi-resource-command $COMMAND_VERSION" build_command

if ((${#missing[@]})); then
    log "not available: ${missing[*]} (see docs/engine-build.md); bin dir has the rest"
    finish 3 "$BIN"
fi
if ! "$BIN/pulumi" version >/dev/null 2>&1; then
    log "$BIN/pulumi does not run"
    exit 1
fi
finish 0 "$BIN"
