#!/usr/bin/env bash
# Make the local stack's base images without a registry: debootstrap a Debian root file system
# with python3, nginx (with the Lua module the usage meter runs in) and prometheus from Debian's packages, `docker import` it, and tag one image
# per role. On a machine that reaches a registry the stack's defaults (python:3.11-slim, nginx,
# prom/prometheus) are the right images and this script is not needed.
#
#   offline/images.sh            # builds what is missing
#   FORCE=1 offline/images.sh    # rebuilds
#   MIRROR=http://… offline/images.sh
#   offline/images.sh --print-mirror    # the Debian mirror it would debootstrap from
set -euo pipefail

SUITE=${SUITE:-bookworm}
# The Debian mirror this machine's apt already uses for SUITE (whatever sources format it is in).
apt_mirror() {
  apt-get indextargets --format '$(REPO_URI)' "Codename: $SUITE" "Identifier: Packages" "Component: main" \
    2>/dev/null | head -n 1
}
PREFIX=glm53-local
ROLES=(python nginx prometheus)
LUA_MODULE=/usr/lib/nginx/modules/ngx_http_lua_module.so

log() { echo "offline-images: $*" >&2; }

if [ "${1:-}" = --print-mirror ]; then
  echo "${MIRROR:-$(apt_mirror)}"
  exit 0
fi

have_all() {
  for role in "${ROLES[@]}"; do
    docker image inspect "$PREFIX/$role:$SUITE" >/dev/null 2>&1 || return 1
  done
  # The usage meter runs in nginx as Lua: images made before it lack the module.
  docker run --rm --entrypoint test "$PREFIX/nginx:$SUITE" -e "$LUA_MODULE" >/dev/null 2>&1 || {
    log "the nginx image has no Lua module (the usage meter's): making the images again"
    return 1
  }
}

if [ -z "${FORCE:-}" ] && have_all; then
  log "images present: $(printf "$PREFIX/%s:$SUITE " "${ROLES[@]}")"
  exit 0
fi

command -v debootstrap >/dev/null || { log "installing debootstrap"; apt-get install -y -q debootstrap >&2; }
MIRROR=${MIRROR:-$(apt_mirror)}
[ -n "$MIRROR" ] || { log "apt has no $SUITE main source to debootstrap from: set MIRROR=http://…/debian"; exit 1; }

work=$(mktemp -d /var/tmp/glm53-rootfs.XXXXXX)
trap 'rm -rf "$work"' EXIT
rootfs="$work/rootfs"
log "debootstrap $SUITE from $MIRROR (a few minutes)"
start=$(date +%s)
debootstrap --variant=minbase --include=python3,nginx-light,libnginx-mod-http-lua,lua-cjson,prometheus,ca-certificates \
  "$SUITE" "$rootfs" "$MIRROR" >"$work/debootstrap.log" 2>&1 \
  || { tail -n 30 "$work/debootstrap.log" >&2; log "debootstrap failed"; exit 1; }
# Leave nothing that a container start depends on from the host, and keep the image small.
chroot "$rootfs" apt-get clean
rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/*
mkdir -p "$rootfs/prometheus" "$rootfs/app"
log "debootstrap took $(( $(date +%s) - start )) s"

tar -C "$rootfs" -c . | docker import -c 'ENV LANG=C.UTF-8' -c 'CMD ["python3"]' \
  - "$PREFIX/python:$SUITE" >/dev/null
# The role images share that one layer; the classic builder needs no registry for a local base.
role_image() {
  printf 'FROM %s\n%s\n' "$PREFIX/python:$SUITE" "$2" \
    | DOCKER_BUILDKIT=0 docker build -q -t "$PREFIX/$1:$SUITE" - >/dev/null
}
role_image nginx 'STOPSIGNAL SIGQUIT
ENTRYPOINT ["nginx", "-g", "daemon off;"]'
role_image prometheus 'WORKDIR /prometheus
ENTRYPOINT ["/bin/prometheus"]
CMD ["--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.path=/prometheus"]'
log "made $(printf "$PREFIX/%s:$SUITE " "${ROLES[@]}")"
