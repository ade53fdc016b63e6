#!/usr/bin/env bash
# Build the Pulumi engine where nothing can be downloaded but Go modules (docs/engine-build.md).
#
#   GLM_ENGINE_SOURCES=DIR offline/build-engine.sh
#
# DIR is a folder you name that holds git repositories (bare or not) of
#   pulumi/pulumi-docker, kreuzwerker/terraform-provider-docker, pulumi/pulumi-command, pulumi/pulumi
# each as DIR/<name>, DIR/<name>.git or DIR/<owner>+<name>/repo. Nothing of them is copied into
# this repository: each is `git archive`d at its release tag into a build folder under the cache.
# The CLI itself comes from the Go module proxy. Every binary is built only when missing, in a temp
# dir, and moved into place last, so an interrupted run is simply run again.
# Exit status: 0 when every binary is there, 3 when some could not be built (named on stderr).
set -euo pipefail
source "$(dirname "$0")/../scripts/versions.env"

CACHE=${GLM_ENGINE_CACHE:-$HOME/.cache/glm53-engine}
BIN=$CACHE/$PULUMI_VERSION/bin
PLUGINS=$CACHE/plugins
SOURCES=${GLM_ENGINE_SOURCES:-}
GO=$(command -v go || echo /usr/local/go/bin/go)

log() { printf 'engine: %s\n' "$*" >&2; }
[[ -x $GO ]] || { log "no go toolchain (looked on PATH and /usr/local/go/bin)"; exit 1; }

export GOMODCACHE=$CACHE/go/mod GOCACHE=$CACHE/go/build
export GOFLAGS="-mod=mod -buildvcs=false" GOWORK=off CGO_ENABLED=0
WORK=$CACHE/work
mkdir -p "$BIN" "$PLUGINS" "$WORK" "$GOMODCACHE" "$GOCACHE"
exec 9>"$CACHE/.build.lock"
flock 9
clean_work() { chmod -R u+w "$WORK" 2>/dev/null || true; rm -rf "${WORK:?}"/*; }
clean_work
trap clean_work EXIT

place() { # place FILE DEST: move a finished binary into place (rename within one filesystem)
    chmod 0755 "$1"
    mv -f "$1" "$2.partial" && mv -f "$2.partial" "$2"
}

repo() { # repo NAME: the git dir of NAME under $SOURCES
    local name=$1 d
    [[ -n $SOURCES ]] || { log "GLM_ENGINE_SOURCES is not set: name the folder that holds the $name repository"; return 1; }
    for d in "$SOURCES/$name" "$SOURCES/$name.git" "$SOURCES"/*+"$name"/repo; do
        [[ -d $d ]] && git -C "$d" rev-parse --git-dir >/dev/null 2>&1 && { printf '%s\n' "$d"; return 0; }
    done
    log "no git repository of $name under $SOURCES (looked for $name, $name.git, <owner>+$name/repo)"
    return 1
}

unpack() { # unpack REPO REV DEST [PATHS…]: the files of REV (tag or commit) under PATHS into DEST
    local r=$1 rev=$2 dest=$3 index missing
    shift 3
    git -C "$r" rev-parse --verify -q "$rev^{commit}" >/dev/null || { log "$r has no $rev"; return 1; }
    mkdir -p "$dest"
    index=$(mktemp "$WORK/index.XXXXXX")
    local g=(git --git-dir="$(git -C "$r" rev-parse --absolute-git-dir)" --work-tree="$(cd "$dest" && pwd)")
    GIT_INDEX_FILE=$index "${g[@]}" read-tree "$rev" || return 1
    # Source copies may lack their largest files (test data, vendored JavaScript): leave out what
    # cannot be read; a file the build really needs then fails the build, naming it.
    missing=$(GIT_INDEX_FILE=$index "${g[@]}" ls-files -s -- "$@" | awk '{print $2}' |
        "${g[@]}" cat-file --batch-check | awk '$2 == "missing" {print $1}')
    [[ -z $missing ]] || log "$(basename "$(dirname "$r")") $rev: $(wc -l <<<"$missing") files missing from the source copy, left out"
    GIT_INDEX_FILE=$index "${g[@]}" ls-files -s -- "$@" | grep -vF "${missing:-no missing files}" | cut -f2- |
        (cd "$dest" && GIT_INDEX_FILE=$index xargs -d '\n' "${g[@]}" checkout-index --)
}

build_pulumi() { # the CLI, from the Go module proxy
    local w pkg sdk
    w=$(mktemp -d "$WORK/pulumi.XXXXXX")
    (cd "$w" && "$GO" mod download github.com/pulumi/pulumi/pkg/v3@"v$PULUMI_VERSION" \
        github.com/pulumi/pulumi/sdk/v3@"v$PULUMI_VERSION") || return 1
    pkg=$GOMODCACHE/github.com/pulumi/pulumi/pkg/v3@v$PULUMI_VERSION
    sdk=$GOMODCACHE/github.com/pulumi/pulumi/sdk/v3@v$PULUMI_VERSION
    # pkg/go.mod replaces sdk/v3 with ../sdk: lay both out side by side, writable.
    cp -R "$pkg" "$w/pkg" && cp -R "$sdk" "$w/sdk" && chmod -R u+w "$w"
    (cd "$w/pkg" && "$GO" build -trimpath -tags osusergo,grpcnotrace \
        -ldflags "-w -s -X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version=v$PULUMI_VERSION" \
        -o "$w/out" ./cmd/pulumi) || return 1
    # The exec shim and the dynamic-provider host are scripts of the same sdk version.
    cp "$sdk/python/cmd/pulumi-language-python-exec" "$w/exec" &&
        cp "$sdk/python/dist/pulumi-resource-pulumi-python" "$w/dyn" || return 1
    place "$w/exec" "$BIN/pulumi-language-python-exec"
    place "$w/dyn" "$BIN/pulumi-resource-pulumi-python"
    place "$w/out" "$BIN/pulumi"
}

build_language_python() { # from the pulumi repository at $LANGHOST_TAG: sdk/ and pkg/ side by side
    local r w
    r=$(repo pulumi) || return 1
    w=$(mktemp -d "$WORK/langhost.XXXXXX")
    unpack "$r" "$LANGHOST_TAG" "$w" sdk pkg || return 1
    (cd "$w/sdk/python/cmd/pulumi-language-python" && "$GO" build -trimpath \
        -ldflags "-w -s -X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version=$LANGHOST_TAG" \
        -o "$w/out" .) || return 1
    place "$w/out" "$BIN/pulumi-language-python"
}

build_docker() { # pulumi-docker at its tag, its upstream submodule at the recorded commit, the release's patches
    local r up w commit p
    r=$(repo pulumi-docker) || return 1
    up=$(repo terraform-provider-docker) || return 1
    w=$(mktemp -d "$WORK/docker.XXXXXX")
    unpack "$r" "v$DOCKER_VERSION" "$w" provider patches || return 1
    commit=$(git -C "$r" ls-tree "v$DOCKER_VERSION" upstream | awk '{print $3}')
    [[ -n $commit ]] || { log "pulumi-docker v$DOCKER_VERSION records no upstream submodule"; return 1; }
    unpack "$up" "$commit" "$w/upstream" || return 1
    for p in "$w"/patches/*.patch; do
        patch -s -p1 -d "$w/upstream" <"$p" || { log "patch $(basename "$p") does not apply"; return 1; }
    done
    (cd "$w/provider/cmd/pulumi-resource-docker" && VERSION=$DOCKER_VERSION "$GO" generate) || return 1
    (cd "$w/provider" && "$GO" build -trimpath \
        -ldflags "-w -s -X github.com/pulumi/pulumi-docker/provider/v4/pkg/version.Version=$DOCKER_VERSION" \
        -o "$w/out" ./cmd/pulumi-resource-docker) || return 1
    place "$w/out" "$PLUGINS/pulumi-resource-docker-$DOCKER_VERSION"
}

build_command() {
    local r w
    r=$(repo pulumi-command) || return 1
    w=$(mktemp -d "$WORK/command.XXXXXX")
    unpack "$r" "v$COMMAND_VERSION" "$w" provider || return 1
    (cd "$w/provider" && "$GO" build -trimpath \
        -ldflags "-w -s -X github.com/pulumi/pulumi-command/provider/pkg/version.Version=$COMMAND_VERSION" \
        -o "$w/out" ./cmd/pulumi-resource-command) || return 1
    place "$w/out" "$PLUGINS/pulumi-resource-command-$COMMAND_VERSION"
}

missing=()
step() { # step FILE LABEL FUNCTION
    local t0=$SECONDS
    [[ -x $1 ]] && return 0
    log "building $2 …"
    if "$3"; then
        log "built $2 in $((SECONDS - t0)) s"
    else
        log "FAILED: $2 (after $((SECONDS - t0)) s)"
        missing+=("$2")
    fi
}

step "$BIN/pulumi" "pulumi $PULUMI_VERSION" build_pulumi
step "$BIN/pulumi-language-python" "pulumi-language-python $LANGHOST_TAG" build_language_python
step "$PLUGINS/pulumi-resource-docker-$DOCKER_VERSION" "pulumi-resource-docker $DOCKER_VERSION" build_docker
step "$PLUGINS/pulumi-resource-command-$COMMAND_VERSION" "pulumi-resource-command $COMMAND_VERSION" build_command

if ((${#missing[@]})); then
    log "not built: ${missing[*]}"
    exit 3
fi
