#!/usr/bin/env bash
# A one-node Kubernetes on this machine, in namespaces of its own, for the e2e tests and rehearsals.
#
#   scripts/k8s/cluster.sh start              # ~20 s; prints the host kubeconfig's path last
#   scripts/k8s/cluster.sh import IMAGE...    # docker save | ctr import into the node's containerd
#   scripts/k8s/cluster.sh status             # exit 0 when the node is Ready
#   scripts/k8s/cluster.sh stop               # processes, namespaces, cgroups and node state gone
#   scripts/k8s/cluster.sh kubeconfig         # the host kubeconfig's path
#
# Needs root and the cache scripts/k8s/build.sh fills (exit 3, naming what lacks, without it).
# Everything runs inside one network + mount namespace held by a `sleep`: node IP 198.19.255.1 on a
# port-less bridge, pods in 198.18.0.0/24, Services in 198.19.0.0/24; /run, /var/lib and /var/log
# are the node's own (the host's /var/lib/glm53-local is bound in: the local stack's weights).
# The host sees only loopback forwards: the API server on 127.0.0.1:$GLM_K8S_API_PORT (16443) and
# the NodePorts $GLM_K8S_NODE_PORTS (30080-30089) on the same numbers. Nothing touches the host's
# network, iptables, Docker or kernel settings (the kubelet's three sysctls get private files).
# The PKI stays in the cache between runs: Pulumi state keeps the kubeconfig's CA.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/versions.env"

PKI=$CACHE/pki
STATE=${GLM_K8S_STATE:-$CACHE/node} # never under /var/lib, /run or /var/log: the node has its own
LOGS=$STATE/logs
API_PORT=${GLM_K8S_API_PORT:-16443}
NODE_PORTS=${GLM_K8S_NODE_PORTS:-30080-30089}
NODE=glm53-node NODE_IP=198.19.255.1 SERVICE_IP=198.19.0.1
POD_CIDR=198.18.0.0/16 POD_SUBNET=198.18.0.0/24 SERVICE_CIDR=198.19.0.0/24
CGROUP=glm53-k8s
PAUSE_IMAGE=docker.io/glm53-k8s/pause:$K8S_VERSION
SOCK=$STATE/containerd/containerd.sock
KUBECONFIG_HOST=$PKI/admin-host.kubeconfig
log() { printf 'k8s: %s\n' "$*" >&2; }

holder() { cat "$STATE/holder.pid" 2>/dev/null; }
in_node() { nsenter -t "$(holder)" -n -m -- "$@"; }
kubectl_node() { in_node "$BIN/kubectl" --kubeconfig "$PKI/admin.kubeconfig" "$@"; }
# run NAME COMMAND…: a daemon inside the node's namespaces, its PID recorded for stop.
run() {
    local name=$1
    shift
    nsenter -t "$(holder)" -n -m -- setsid "$@" >"$LOGS/$name.log" 2>&1 </dev/null &
    echo $! >"$STATE/$name.pid"
}
wait_for() { # wait_for SECONDS WHAT COMMAND…
    local seconds=$1 what=$2 i
    shift 2
    for ((i = 0; i < seconds * 5; i++)); do
        "$@" >/dev/null 2>&1 && return 0
        sleep 0.2
    done
    log "$what did not come up within ${seconds}s (logs: $LOGS)"
    return 1
}
fill() { # fill TEMPLATE: the node's settings for its {{NAME}} placeholders (components/template.py's style)
    sed -e "s#{{STATE}}#$STATE#g" -e "s#{{CNI_BIN}}#$ROOT/cni#g" -e "s#{{PAUSE_IMAGE}}#$PAUSE_IMAGE#g" \
        -e "s#{{CGROUP}}#$CGROUP#g" -e "s#{{NODE}}#$NODE#g" -e "s#{{NODE_IP}}#$NODE_IP#g" \
        -e "s#{{POD_CIDR}}#$POD_CIDR#g" -e "s#{{POD_SUBNET}}#$POD_SUBNET#g" -e "s#{{PKI}}#$PKI#g" "$HERE/node/$1"
}

gen_pki() { # certificates with openssl, kubeconfigs with kubectl; once per machine
    [[ -s $PKI/ca.crt && -s $KUBECONFIG_HOST ]] && return 0
    mkdir -p "$PKI" && (
        cd "$PKI"
        umask 077
        openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 3650 \
            -subj "/CN=glm53-k8s-ca" 2>/dev/null
        cert() { # NAME CN [O] [SAN]: a client certificate, or a server one with a SAN
            local subj="/CN=$2"
            [[ -n ${3:-} ]] && subj="/O=$3/CN=$2"
            openssl req -newkey rsa:2048 -nodes -keyout "$1.key" -out "$1.csr" -subj "$subj" 2>/dev/null
            {
                echo "basicConstraints=CA:FALSE"
                echo "keyUsage=critical,digitalSignature,keyEncipherment"
                if [[ -n ${4:-} ]]; then
                    echo "extendedKeyUsage=serverAuth,clientAuth"
                    echo "subjectAltName=$4"
                else echo "extendedKeyUsage=clientAuth"; fi
            } >"$1.ext"
            openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -out "$1.crt" \
                -days 3650 -extfile "$1.ext" 2>/dev/null
            rm -f "$1.csr" "$1.ext"
        }
        cert apiserver kube-apiserver "" "IP:127.0.0.1,IP:$SERVICE_IP,IP:$NODE_IP,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
        cert apiserver-kubelet-client kube-apiserver-kubelet-client system:masters
        cert admin admin system:masters
        cert controller-manager system:kube-controller-manager
        cert scheduler system:kube-scheduler
        cert kubelet "system:node:$NODE" system:nodes
        cert kube-proxy system:kube-proxy
        openssl genrsa -out sa.key 2048 2>/dev/null
        openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
        for user in admin controller-manager scheduler kubelet kube-proxy; do
            k=(--kubeconfig "$user.kubeconfig")
            "$BIN/kubectl" config "${k[@]}" set-cluster glm53 --server=https://127.0.0.1:6443 \
                --certificate-authority=ca.crt --embed-certs >/dev/null
            "$BIN/kubectl" config "${k[@]}" set-credentials "$user" --client-certificate="$user.crt" \
                --client-key="$user.key" --embed-certs >/dev/null
            "$BIN/kubectl" config "${k[@]}" set-context glm53 --cluster=glm53 --user="$user" >/dev/null
            "$BIN/kubectl" config "${k[@]}" use-context glm53 >/dev/null
        done
        sed "s#https://127.0.0.1:6443#https://127.0.0.1:$API_PORT#" admin.kubeconfig >admin-host.kubeconfig
    )
}

node_namespace() { # the net + mount namespace, held by `sleep infinity`
    mkdir -p "$STATE"/{varlib,varlog,sysctl,cni-ipam,cni-conf,containerd,kubelet,etcd} "$LOGS"
    fill cni.conflist >"$STATE/cni-conf/10-glm53.conflist"
    echo 1 >"$STATE/sysctl/overcommit_memory"
    echo 10 >"$STATE/sysctl/panic"
    echo 1 >"$STATE/sysctl/panic_on_oops"
    cat >"$STATE/ns-init.sh" <<EOS
set -e
mount -t tmpfs tmpfs /run
mkdir -p /run/netns /run/lock
if [ -d /var/lib/glm53-local ]; then
    mkdir -p $STATE/varlib/glm53-local && mount --bind /var/lib/glm53-local $STATE/varlib/glm53-local
fi
# --rbind: with the glm53-local bind inside it (a plain --bind leaves the node an empty folder there).
mount --rbind $STATE/varlib /var/lib
mount --bind $STATE/varlog /var/log
# The kubelet sets these three sysctls: it gets private files, the host's settings stay.
mount --bind $STATE/sysctl/overcommit_memory /proc/sys/vm/overcommit_memory
mount --bind $STATE/sysctl/panic /proc/sys/kernel/panic
mount --bind $STATE/sysctl/panic_on_oops /proc/sys/kernel/panic_on_oops
ip link set lo up
ip link add node0 type bridge   # this kernel has no dummy links: a bridge without ports
ip addr add $NODE_IP/32 dev node0
ip link set node0 up
ip route add default dev node0
echo 1 > /proc/sys/net/ipv4/ip_forward
echo 1 > /proc/sys/net/bridge/bridge-nf-call-iptables 2>/dev/null || true
echo \$\$ > $STATE/holder.pid
exec sleep infinity
EOS
    setsid unshare --net --mount --propagation private --fork bash "$STATE/ns-init.sh" \
        >"$LOGS/namespace.log" 2>&1 </dev/null &
    echo $! >"$STATE/unshare.pid"
    wait_for 10 "the node's namespace" test -s "$STATE/holder.pid"
}

cgroups() { # a cgroup v1 parent for everything the kubelet creates: stop is one rmdir walk
    local c
    for c in /sys/fs/cgroup/*/; do
        case $c in */unified/ | */systemd/) continue ;; esac
        mkdir -p "$c$CGROUP"
        if [[ -f ${c}cpuset.cpus ]]; then
            cat "${c}cpuset.cpus" >"$c$CGROUP/cpuset.cpus"
            cat "${c}cpuset.mems" >"$c$CGROUP/cpuset.mems"
        fi
    done
    [[ -d /sys/fs/cgroup/systemd ]] && mkdir -p "/sys/fs/cgroup/systemd/$CGROUP"
    return 0
}

start() {
    local t0=$SECONDS
    local part
    for part in "$BIN"/{etcd,kube-apiserver,kube-controller-manager,kube-scheduler,kubelet,kube-proxy,kubectl} \
        "$ROOT/cni/bridge" "$ROOT/images/pause.tar"; do
        [[ -e $part ]] || { log "$part is missing: build the cache first (make k8s-build)"; exit 3; }
    done
    [[ $(id -u) == 0 ]] || { log "needs root (namespaces, cgroups, containerd)"; exit 3; }
    if [[ -s $STATE/holder.pid ]] && kill -0 "$(holder)" 2>/dev/null; then
        log "already running (scripts/k8s/cluster.sh stop first)"
        printf '%s\n' "$KUBECONFIG_HOST"
        return 0
    fi
    rm -rf "$STATE"
    gen_pki
    node_namespace
    fill containerd.toml >"$STATE/containerd.toml"
    fill kubelet.yaml >"$STATE/kubelet.yaml"
    fill kube-proxy.yaml >"$STATE/kube-proxy.yaml"
    run containerd containerd --config "$STATE/containerd.toml"
    run etcd "$BIN/etcd" --name glm53 --data-dir "$STATE/etcd" \
        --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
        --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
        --initial-cluster glm53=http://127.0.0.1:2380 --listen-metrics-urls http://127.0.0.1:2381
    wait_for 10 containerd test -S "$SOCK"
    ctr -a "$SOCK" -n k8s.io images import "$ROOT/images/pause.tar" >/dev/null
    run kube-apiserver "$BIN/kube-apiserver" --etcd-servers=http://127.0.0.1:2379 \
        --bind-address=0.0.0.0 --secure-port=6443 --advertise-address=$NODE_IP \
        --service-cluster-ip-range=$SERVICE_CIDR --allow-privileged=true \
        --tls-cert-file="$PKI/apiserver.crt" --tls-private-key-file="$PKI/apiserver.key" \
        --client-ca-file="$PKI/ca.crt" \
        --kubelet-client-certificate="$PKI/apiserver-kubelet-client.crt" \
        --kubelet-client-key="$PKI/apiserver-kubelet-client.key" \
        --service-account-key-file="$PKI/sa.pub" --service-account-signing-key-file="$PKI/sa.key" \
        --service-account-issuer=https://kubernetes.default.svc.cluster.local \
        --authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction --profiling=false \
        --kubelet-preferred-address-types=InternalIP,Hostname
    wait_for 60 "the API server" kubectl_node get --raw /readyz
    run kube-controller-manager "$BIN/kube-controller-manager" \
        --kubeconfig="$PKI/controller-manager.kubeconfig" \
        --authentication-kubeconfig="$PKI/controller-manager.kubeconfig" \
        --authorization-kubeconfig="$PKI/controller-manager.kubeconfig" \
        --bind-address=127.0.0.1 --leader-elect=false \
        --cluster-signing-cert-file="$PKI/ca.crt" --cluster-signing-key-file="$PKI/ca.key" \
        --root-ca-file="$PKI/ca.crt" --service-account-private-key-file="$PKI/sa.key" \
        --use-service-account-credentials=true --allocate-node-cidrs=true \
        --cluster-cidr=$POD_CIDR --node-cidr-mask-size=24 --service-cluster-ip-range=$SERVICE_CIDR
    run kube-scheduler "$BIN/kube-scheduler" --kubeconfig="$PKI/scheduler.kubeconfig" \
        --authentication-kubeconfig="$PKI/scheduler.kubeconfig" \
        --authorization-kubeconfig="$PKI/scheduler.kubeconfig" --bind-address=127.0.0.1 --leader-elect=false
    cgroups
    run kubelet "$BIN/kubelet" --config="$STATE/kubelet.yaml" --kubeconfig="$PKI/kubelet.kubeconfig" \
        --root-dir="$STATE/kubelet" --hostname-override=$NODE --node-ip=$NODE_IP
    run kube-proxy "$BIN/kube-proxy" --config="$STATE/kube-proxy.yaml"
    local routes=("$API_PORT:127.0.0.1:6443") port
    for port in $(seq "${NODE_PORTS%-*}" "${NODE_PORTS#*-}"); do routes+=("$port:$NODE_IP:$port"); done
    setsid python3 "$HERE/forward.py" "$(holder)" "${routes[@]}" >"$LOGS/forward.log" 2>&1 </dev/null &
    echo $! >"$STATE/forward.pid"
    wait_for 60 "node $NODE" kubectl_node get node $NODE
    kubectl_node wait --for=condition=Ready node/$NODE --timeout=60s >/dev/null
    wait_for 30 "the default service account" kubectl_node get serviceaccount default
    wait_for 10 "the API forward" "$BIN/kubectl" --kubeconfig "$KUBECONFIG_HOST" get --raw /readyz
    log "node Ready in $((SECONDS - t0)) s; KUBECONFIG=$KUBECONFIG_HOST"
    printf '%s\n' "$KUBECONFIG_HOST"
}

import_images() { # each image from the host's Docker into the node's containerd
    local t0=$SECONDS image
    [[ -S $SOCK ]] || { log "the cluster is not running"; exit 1; }
    for image in "$@"; do
        docker save "$image" | ctr -a "$SOCK" -n k8s.io images import - >/dev/null
    done
    log "imported $# image(s) in $((SECONDS - t0)) s"
}

stop_pid() {
    local file=$STATE/$1.pid pid i
    [[ -f $file ]] || return 0
    pid=$(cat "$file")
    if kill "$pid" 2>/dev/null; then
        for ((i = 0; i < 50; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
        kill -9 "$pid" 2>/dev/null || true
    fi
    rm -f "$file"
}

stop() {
    local t0=$SECONDS name task pid c left=""
    [[ -d $STATE ]] || { log "not running"; return 0; }
    for name in forward kube-proxy kubelet kube-scheduler kube-controller-manager kube-apiserver etcd; do
        stop_pid $name
    done
    if [[ -S $SOCK ]]; then # the pods' containers, then the shims that serve our socket only
        for task in $(ctr -a "$SOCK" -n k8s.io tasks ls -q 2>/dev/null); do
            ctr -a "$SOCK" -n k8s.io tasks kill -s KILL "$task" 2>/dev/null || true
        done
        sleep 1
        for pid in $(pgrep -f "containerd-shim-runc-v2 -namespace k8s.io -id [0-9a-f]* -address $SOCK" || true); do
            kill -9 "$pid" 2>/dev/null || true
        done
    fi
    stop_pid containerd
    # The namespace holder last: its network (veths, iptables) and mounts go with it.
    [[ -s $STATE/holder.pid ]] && kill "$(holder)" 2>/dev/null || true
    stop_pid unshare
    sleep 1
    for c in /sys/fs/cgroup/*/"$CGROUP"; do
        [[ -d $c ]] && find "$c" -depth -type d -exec rmdir {} \; 2>/dev/null
    done
    left=$(ls -d /sys/fs/cgroup/*/"$CGROUP" 2>/dev/null || true)
    rm -rf "$STATE"
    [[ -z $left ]] || { log "cgroups left behind: $left"; return 1; }
    log "stopped in $((SECONDS - t0)) s; nothing left ($STATE removed, PKI kept in $PKI)"
}

status() {
    [[ -s $STATE/holder.pid ]] && kill -0 "$(holder)" 2>/dev/null || { log "not running"; return 1; }
    "$BIN/kubectl" --kubeconfig "$KUBECONFIG_HOST" get nodes
}

case ${1:-} in
start) start ;;
stop) stop ;;
status) status ;;
import) shift && import_images "$@" ;;
kubeconfig) printf '%s\n' "$KUBECONFIG_HOST" ;;
*)
    sed -n '2,9p' "$0" >&2
    exit 2
    ;;
esac
