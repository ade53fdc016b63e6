#!/usr/bin/env bash
# Build, once per machine, everything a one-node Kubernetes needs, into a cache; prints the cache's
# bin folder as the last stdout line (everything else goes to stderr).
#
#   scripts/k8s/build.sh            # ~15 min cold on 2 cores; well under a second when complete
#   scripts/k8s/build.sh --check    # exit 0 when the cache is complete, 3 (naming what lacks) if not
#
# Cache: ${GLM_K8S_CACHE:-~/.cache/glm53-k8s}/<k8s version>/
#   bin/      kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl etcd
#             pulumi-resource-kubernetes
#   cni/      the CNI plugins (Debian's containernetworking-plugins, extracted, not installed)
#   images/   pause.tar (the sandbox image, built from the pause.c inside the k8s.io/kubernetes module)
# Every binary comes from the Go module proxy (docs/scaling.md names the modules); Go's module and
# build caches live in a scratch folder under the cache and are removed at the end (~8 GB).
# Each part is built only when missing and moved into place last: an interrupted run is run again.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/versions.env"

WORK=$CACHE/work
K8S_CMDS=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl)
log() { printf 'k8s-build: %s\n' "$*" >&2; }

missing() {
    local f
    for f in "${K8S_CMDS[@]}" etcd "pulumi-resource-kubernetes"; do
        [[ -x $BIN/$f ]] || echo "$BIN/$f"
    done
    [[ -x $ROOT/cni/bridge && -x $ROOT/cni/host-local && -x $ROOT/cni/loopback ]] || echo "$ROOT/cni"
    [[ -s $ROOT/images/pause.tar ]] || echo "$ROOT/images/pause.tar"
}

if [[ ${1:-} == --check ]]; then
    lacking=$(missing)
    [[ -z $lacking ]] && { printf '%s\n' "$BIN"; exit 0; }
    log "the Kubernetes cache is incomplete (make k8s-build builds it): $(echo $lacking)"
    exit 3
fi

export PATH=/usr/local/go/bin:$PATH
command -v go >/dev/null || { log "no Go toolchain (go1.26 in /usr/local/go/bin expected)"; exit 3; }
export GOMODCACHE=$WORK/gomod GOCACHE=$WORK/gocache GOFLAGS="-mod=mod -buildvcs=false" GOWORK=off
export CGO_ENABLED=0 GOTOOLCHAIN=local
mkdir -p "$BIN"
gobuild() { nice -n 10 go build -p "$(nproc)" -trimpath "$@"; }
timed() { # timed NAME COMMAND…: run, logging the wall clock
    local t0=$SECONDS
    "$@"
    log "$1: $((SECONDS - t0)) s"
}

build_kubernetes() {
    local w=$WORK/kubernetes m ld p out=$WORK/out-k8s
    mkdir -p "$w" "$out" && cd "$w"
    go mod download "k8s.io/kubernetes@$K8S_VERSION"
    printf 'module glm53/k8sbuild\n\ngo 1.26.0\n\nrequire k8s.io/kubernetes %s\n' "$K8S_VERSION" >go.mod
    # k8s.io/kubernetes' go.mod points each staging module at ./staging/…: pin them to the tags.
    for m in $(awk '/=> .\/staging/ {print $1}' "$GOMODCACHE/k8s.io/kubernetes@$K8S_VERSION/go.mod"); do
        echo "replace $m => $m $K8S_STAGING_VERSION" >>go.mod
    done
    go get $(printf "k8s.io/kubernetes/cmd/%s@$K8S_VERSION " "${K8S_CMDS[@]}")
    local minor=${K8S_VERSION#v1.}
    minor=${minor%%.*}
    ld="-s -w"
    for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
        ld+=" -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
    done
    gobuild -ldflags "$ld" -o "$out/" $(printf 'k8s.io/kubernetes/cmd/%s ' "${K8S_CMDS[@]}")
    mv "$out"/* "$BIN/"
    # The sandbox ("pause") image, from the pause.c the module ships; gcc -static, FROM scratch.
    [[ -s $ROOT/images/pause.tar ]] || build_pause
}

build_pause() {
    local w=$WORK/pause tag="glm53-k8s/pause:$K8S_VERSION"
    mkdir -p "$w" "$ROOT/images"
    [[ -f $GOMODCACHE/k8s.io/kubernetes@$K8S_VERSION/build/pause/linux/pause.c ]] ||
        go mod download "k8s.io/kubernetes@$K8S_VERSION"
    install -m 644 "$GOMODCACHE/k8s.io/kubernetes@$K8S_VERSION/build/pause/linux/pause.c" "$w/pause.c"
    gcc -Os -static -DVERSION="$K8S_VERSION-glm53" -o "$w/pause" "$w/pause.c"
    printf 'FROM scratch\nCOPY pause /pause\nUSER 65535:65535\nENTRYPOINT ["/pause"]\n' >"$w/Dockerfile"
    docker build -q -t "$tag" "$w" >&2
    docker save -o "$w/pause.tar" "$tag"
    docker rmi "$tag" >/dev/null # the host's Docker is left as it was: containerd imports the tar
    mv "$w/pause.tar" "$ROOT/images/pause.tar"
}

build_etcd() {
    local w=$WORK/etcd
    mkdir -p "$w" && cd "$w"
    printf 'module glm53/etcdbuild\n\ngo 1.26.0\n' >go.mod
    go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION"
    gobuild -ldflags "-s -w" -o "$w/etcd" go.etcd.io/etcd/server/v3
    mv "$w/etcd" "$BIN/etcd"
}

build_provider() {
    local w=$WORK/provider d
    mkdir -p "$w" && cd "$w"
    go mod download "github.com/pulumi/pulumi-kubernetes/provider/v4@$K8S_PROVIDER_MODULE"
    d=$GOMODCACHE/github.com/pulumi/pulumi-kubernetes/provider/v4@$K8S_PROVIDER_MODULE/cmd/pulumi-resource-kubernetes
    mkdir -p cmd/pulumi-resource-kubernetes
    install -m 644 "$d"/{main.go,schema.json,terraform-mapping.json} cmd/pulumi-resource-kubernetes/
    # What upstream's `go generate` does: stamp the version into the schema, compact both for go:embed.
    python3 - "$K8S_PROVIDER_VERSION" <<'PY'
import json, sys
d = "cmd/pulumi-resource-kubernetes/"
schema = json.load(open(d + "schema.json"))
schema["version"] = sys.argv[1]
json.dump(schema, open(d + "schema-embed.json", "w"), separators=(",", ":"))
json.dump(json.load(open(d + "terraform-mapping.json")), open(d + "terraform-mapping-embed.json", "w"), separators=(",", ":"))
PY
    cat >go.mod <<EOF
module glm53/providerbuild

go 1.26.0

require github.com/pulumi/pulumi-kubernetes/provider/v4 $K8S_PROVIDER_MODULE

// upstream's go.mod replaces sdk/v4 with ../sdk: a module consumer points it at a published sdk
replace github.com/pulumi/pulumi-kubernetes/sdk/v4 => github.com/pulumi/pulumi-kubernetes/sdk/v4 $K8S_PROVIDER_SDK
EOF
    go mod tidy
    gobuild -ldflags "-s -w -X github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/version.Version=$K8S_PROVIDER_VERSION" \
        -o "$w/pulumi-resource-kubernetes" ./cmd/pulumi-resource-kubernetes
    mv "$w/pulumi-resource-kubernetes" "$BIN/"
}

build_cni() {
    local w=$WORK/cni
    mkdir -p "$w" && cd "$w"
    apt-get download "$CNI_PACKAGE" >&2
    dpkg -x "$CNI_PACKAGE"_*.deb root
    mkdir -p "$ROOT/cni.new"
    cp root/usr/lib/cni/* "$ROOT/cni.new/"
    rm -rf "$ROOT/cni" && mv "$ROOT/cni.new" "$ROOT/cni"
}

t0=$SECONDS
lacking=$(missing)
[[ -z $lacking ]] || mkdir -p "$WORK"
[[ $lacking == *kube-apiserver* || $lacking == *kubectl* || $lacking == *kubelet* ]] && timed build_kubernetes
[[ -s $ROOT/images/pause.tar ]] || timed build_pause
[[ -x $BIN/etcd ]] || timed build_etcd
[[ -x $BIN/pulumi-resource-kubernetes ]] || timed build_provider
[[ -x $ROOT/cni/bridge ]] || timed build_cni
if [[ -n $lacking ]]; then
    log "whole build: $((SECONDS - t0)) s; Go caches: $(du -sh "$WORK" 2>/dev/null | cut -f1), removed"
    chmod -R u+w "$WORK" && rm -rf "$WORK"
fi
lacking=$(missing)
[[ -z $lacking ]] || { log "still missing: $(echo $lacking)"; exit 3; }
# Into Pulumi's plugin cache (as scripts/engine.sh does for docker and command), where a CLI is on PATH.
if command -v pulumi >/dev/null &&
    ! pulumi plugin ls 2>/dev/null | grep -Eq "^kubernetes +resource +$K8S_PROVIDER_VERSION "; then
    pulumi plugin install resource kubernetes "$K8S_PROVIDER_VERSION" --file "$BIN/pulumi-resource-kubernetes" >&2
fi
printf '%s\n' "$BIN"
