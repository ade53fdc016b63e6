# shellcheck shell=sh
# shellcheck disable=SC1083 # the doubled braces are placeholders components/template.py fills
# The front's request loop (components/rotation_requests.py): the semantic probe's only way to
# change the rotation. Started in the background by the front container's command, before nginx
# replaces that shell as PID 1. The probe writes one file per replica into {{REQUESTS}} (a volume
# shared with the probe and nothing else of the front), `<replica>.req`, holding one line:
#
#   eject REPLICA SINCE TEXT   out of rotation (rotation.sh eject: only a replica in rotation
#                              since before SINCE, when the failures began, in epoch seconds)
#   readmit REPLICA        back in (rotation.sh readmit: only one the probe ejected)
#
# Anything else is refused and logged. The loop never restarts, never reads or writes anything but
# this directory and the rotation (through rotation.sh itself, under its lock).
requests={{REQUESTS}}
script={{SCRIPT}}
mkdir -p "$requests"
chown 65534:65534 "$requests"
chmod 0700 "$requests"
log() { echo "rotation-requests: $*" >&2; }
while :; do
  for f in "$requests"/*.req; do
    [ -f "$f" ] || continue
    line=$(head -c 1024 "$f" | head -n 1)
    rm -f "$f"
    file=${f##*/}
    file=${file%.req}
    # Split into words on purpose, without globbing: a `*` in a request stays a `*`.
    set -f
    # shellcheck disable=SC2086
    set -- $line
    set +f
    verb=${1:-}
    name=${2:-}
    case "$name" in
      "" | [!A-Za-z0-9]* | *[!A-Za-z0-9._-]*) log "refused a request naming '$name' (file $file.req)"; continue ;;
    esac
    if [ "$name" != "$file" ]; then
      log "refused: $file.req names $name"
      continue
    fi
    case "$verb" in
      eject)
        since=${3:-}
        if [ $# -ge 3 ]; then shift 3; else set --; fi
        sh "$script" eject "$name" "$since" "$*" >&2 || log "eject $name failed"
        ;;
      readmit)
        sh "$script" readmit "$name" >&2 || log "readmit $name failed"
        ;;
      *) log "refused an unknown request '$verb' for $name" ;;
    esac
  done
  sleep 0.5
done
