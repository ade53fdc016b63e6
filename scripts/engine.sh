#!/usr/bin/env bash
# Make the Pulumi engine available: prints the directory that holds the CLI and its language host
# as the last stdout line (everything else goes to stderr), with the docker and command providers
# installed in Pulumi's plugin cache.
#
#   PATH="$(scripts/engine.sh | tail -1):$PATH"
#
# 1. a complete engine cache, ${GLM_ENGINE_CACHE:-~/.cache/glm53-engine}: used as it is;
# 2. else the official installer and `pulumi plugin install`;
# 3. else, where only package registries answer, offline/build-engine.sh builds from source
#    (set GLM_ENGINE_SOURCES to the folder that holds the repositories; docs/engine-build.md).
# Exit status 0 when the engine is complete, 3 when something could not be had (named on stderr).
set -euo pipefail
source "$(dirname "$0")/versions.env"
export PULUMI_SKIP_UPDATE_CHECK=true

CACHE=${GLM_ENGINE_CACHE:-$HOME/.cache/glm53-engine}
BIN=$CACHE/$PULUMI_VERSION/bin
PLUGINS=$CACHE/plugins
log() { printf 'engine: %s\n' "$*" >&2; }

have_engine() {
    local f
    for f in "$BIN"/{pulumi,pulumi-language-python,pulumi-language-python-exec,pulumi-resource-pulumi-python} \
        "$PLUGINS/pulumi-resource-docker-$DOCKER_VERSION" "$PLUGINS/pulumi-resource-command-$COMMAND_VERSION"; do
        [[ -x $f ]] || return 1
    done
}

installer() { # the official path, into the cache; plugin binaries copied next to it for next time
    local script home=${PULUMI_HOME:-$HOME/.pulumi}
    script=$(mktemp)
    trap 'rm -f "$script"' RETURN
    curl -fsSL --max-time 10 https://get.pulumi.com -o "$script" 2>/dev/null || {
        log "get.pulumi.com is not reachable"
        return 1
    }
    sh "$script" --version "$PULUMI_VERSION" --install-root "$CACHE/$PULUMI_VERSION" --no-edit-path --silent >&2 &&
        "$BIN/pulumi" plugin install resource docker "$DOCKER_VERSION" >&2 &&
        "$BIN/pulumi" plugin install resource command "$COMMAND_VERSION" >&2 &&
        cp "$home/plugins/resource-docker-v$DOCKER_VERSION/pulumi-resource-docker" "$PLUGINS/pulumi-resource-docker-$DOCKER_VERSION" &&
        cp "$home/plugins/resource-command-v$COMMAND_VERSION/pulumi-resource-command" "$PLUGINS/pulumi-resource-command-$COMMAND_VERSION"
}

# Into Pulumi's plugin cache, so no run finds (and warns about) providers on PATH. Installed: the
# plugin's binary in its folder and no `.partial` marker beside it (Pulumi's own mark of an install
# that did not finish). Read from the file system, not `pulumi plugin ls`: that took 0.8 s a call,
# twice on every scripts/pulumi.sh.
install_plugins() {
    local kind version dir
    for kind in docker command; do
        [[ $kind == docker ]] && version=$DOCKER_VERSION || version=$COMMAND_VERSION
        dir=${PULUMI_HOME:-$HOME/.pulumi}/plugins/resource-$kind-v$version
        [[ -x $dir/pulumi-resource-$kind && ! -e $dir.partial ]] && continue
        "$BIN/pulumi" plugin install resource "$kind" "$version" --file "$PLUGINS/pulumi-resource-$kind-$version" >&2 ||
            return 1
    done
}

mkdir -p "$BIN" "$PLUGINS"
if ! have_engine; then
    installer || "$(dirname "$0")/../offline/build-engine.sh" || true
fi
if ! have_engine; then
    log "the engine is incomplete in $CACHE (see docs/engine-build.md)"
    printf '%s\n' "$BIN"
    exit 3
fi
install_plugins
printf '%s\n' "$BIN"
