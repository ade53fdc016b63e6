# shellcheck shell=sh
# shellcheck disable=SC1083 # the doubled braces are placeholders components/template.py fills
# The front's request loop (components/docker/rotation_requests.py): the semantic probe's only way to
# change the rotation. Started in the background by the front container's command, before nginx
# replaces that shell as PID 1. The probe writes one file per replica into {{REQUESTS}} (a volume
# shared with the probe and nothing else of the front), `<replica>.req`, holding one line:
#
#   eject REPLICA SINCE TEXT   out of rotation (rotation.sh eject: only a replica in rotation
#                              since before SINCE, when the failures began, in epoch seconds)
#   readmit REPLICA        back in (rotation.sh readmit: only one the probe ejected)
#
# Anything else is refused and logged, without its content: the log names the replica only once
# its file's name has passed the replica alphabet, and never a verb, a time or the text. The loop
# never restarts, never follows a link and never reads anything but the regular files of this
# directory (dd's O_NOFOLLOW refuses a link that is the file; the directory itself is a mount point
# the probe cannot replace; O_NONBLOCK makes a FIFO read as empty instead of blocking the loop); it
# changes the rotation only through rotation.sh itself, under its lock. Needs GNU dd (Debian's
# coreutils); without iflag=nofollow every request reads as empty and is refused.
requests={{REQUESTS}}
script={{SCRIPT}}
mkdir -p "$requests"
chown 65534:65534 "$requests"
chmod 0700 "$requests"
log() { echo "rotation-requests: $*" >&2; }
while :; do
  for f in "$requests"/*.req; do
    [ -e "$f" ] || [ -L "$f" ] || continue
    line=$(dd if="$f" iflag=nofollow,nonblock bs=1024 count=1 status=none 2>/dev/null | head -n 1)
    rm -f -- "$f" 2>/dev/null || continue  # a directory: not a request, left alone
    file=${f##*/}
    file=${file%.req}
    case "$file" in
      "" | [!A-Za-z0-9]* | *[!A-Za-z0-9._-]*) log "refused a request file not named after a replica"; continue ;;
    esac
    # Split into words on purpose, without globbing: a `*` in a request stays a `*`.
    set -f
    # shellcheck disable=SC2086
    set -- $line
    set +f
    verb=${1:-}
    if [ "${2:-}" != "$file" ]; then
      log "refused: $file.req names another replica or none"
      continue
    fi
    case "$verb" in
      eject)
        since=${3:-}
        case "$since" in
          "" | *[!0-9]*) log "refused: $file.req's eject has no time the failures began (epoch seconds)"; continue ;;
        esac
        if [ $# -ge 3 ]; then shift 3; else set --; fi
        sh "$script" eject "$file" "$since" "$*" >&2 || log "eject $file failed"
        ;;
      readmit)
        sh "$script" readmit "$file" >&2 || log "readmit $file failed"
        ;;
      *) log "refused: $file.req asks neither eject nor readmit" ;;
    esac
  done
  sleep 0.5
done
