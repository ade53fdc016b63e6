# shellcheck shell=sh
# shellcheck disable=SC1083 # the doubled braces are placeholders components/template.py fills
# One Prometheus release (components/docker/prometheus_release.py): run in the Prometheus container
# as `sh -c "<this file>" sh RELEASE_ID`, the release's files as a base64 tar on stdin. Written
# beside the live one, checked with `promtool check config` (which loads the rules), made current,
# loaded with SIGHUP; the previous release comes back if Prometheus does not load it.
set -eu
root={{ROOT}}
release=$1
dir=$root/releases/$release
tries_max={{TRIES}}
umask 077

# "<successful> <timestamp>" of Prometheus' last config load, from its own /metrics (promtool is
# the one HTTP client both the official image and the local one have); empty while it does not answer.
loaded() {
  tmp=$(mktemp -d)
  (cd "$tmp" && promtool debug metrics http://127.0.0.1:{{PORT}} >/dev/null 2>&1 && tar -xzOf debug.tar.gz metrics.txt) |
    awk '$1 == "prometheus_config_last_reload_successful" { ok = $2 }
         $1 == "prometheus_config_last_reload_success_timestamp_seconds" { at = $2 }
         END { if (ok != "") print ok, at }' || true
  rm -rf "$tmp"
}
# PID 1 is Prometheus once the container's command has found the first release and exec'd it.
is_prometheus() { case "$({ tr '\000' '\n' < /proc/1/cmdline | head -n 1; } 2>/dev/null)" in */prometheus | prometheus) return 0 ;; esac; return 1; }
# Wait (every 0.2 s, at most $tries_max times) until Prometheus reports a successful load after $1
# (a load timestamp; "none": any load). Returns 2 at once on a failed reload, 1 on timeout.
wait_loaded() {
  tries=0
  while [ "$tries" -lt "$tries_max" ]; do
    state=$(loaded)
    ok=${state%% *}
    at=${state#* }
    if [ "$ok" = 1 ] && [ "$at" != "$1" ] && [ "$at" != 0 ]; then return 0; fi
    if [ "$1" != none ] && [ "$ok" = 0 ]; then return 2; fi
    tries=$((tries + 1))
    sleep 0.2
  done
  return 1
}

mkdir -p "$root/releases"
rm -rf "$dir.new"
mkdir "$dir.new"
base64 -d | tar -x -f - -C "$dir.new"
if ! out=$(promtool check config "$dir.new/prometheus.yml" 2>&1); then
  rm -rf "$dir.new"
  printf 'promtool refused the new Prometheus config, so it was not loaded; Prometheus keeps its current one.\n%s\n' "$out" >&2
  exit 3
fi
# A running Prometheus: its current load's timestamp, once it has loaded one (never SIGHUP before:
# the signal could come before its handler).
before=none
if is_prometheus; then
  wait_loaded none || true
  state=$(loaded)
  before=${state#* }
fi
rm -rf "$dir"
mv "$dir.new" "$dir"
previous=$(readlink "$root/current" 2>/dev/null || true)
ln -sfn "releases/$release" "$root/current.new"
mv -Tf "$root/current.new" "$root/current"
if [ "$before" != none ]; then kill -HUP 1; fi
status=0
wait_loaded "$before" || status=$?
if [ "$status" != 0 ]; then
  if [ -n "$previous" ] && [ "$previous" != "releases/$release" ]; then
    ln -sfn "$previous" "$root/current.new"
    mv -Tf "$root/current.new" "$root/current"
    if [ "$before" != none ]; then kill -HUP 1; fi
  fi
  echo "Prometheus did not load release $release (reload failed or no answer within {{WAIT}} s); the previous release is current again. See the container's log (docker logs) for Prometheus' reason." >&2
  exit 4
fi
# Only the live release stays: an old scrape key must not stay on disk.
for d in "$root"/releases/*; do
  if [ "${d##*/}" != "$release" ]; then rm -rf "$d"; fi
done
echo "Prometheus release $release is live"
