# shellcheck shell=sh
# shellcheck disable=SC1083 # the doubled braces are placeholders components/template.py fills
# One front release (components/docker/nginx_reload.py): run in the front container as
# `sh -c "<this file>" sh RELEASE_ID`, the release's files as a base64 tar on stdin. Written beside
# the others, checked with `nginx -t`, made current, loaded with a graceful reload; the previous
# release comes back if nginx does not switch.
set -eu
root={{ROOT}}
release=$1
dir=$root/releases/$release
umask 077
mkdir -p "$root/releases"
rm -rf "$dir.new"
mkdir "$dir.new"
base64 -d | tar -x -f - -C "$dir.new"
if ! out=$(nginx -t -q -e stderr -c "$dir.new/nginx.conf" 2>&1); then
  rm -rf "$dir.new"
  printf 'nginx -t refused the new front config, so it was not loaded; the front keeps serving its current config.\n%s\n' "$out" >&2
  exit 3
fi
rm -rf "$dir"
mv "$dir.new" "$dir"
previous=$(readlink "$root/current" 2>/dev/null || true)
ln -sfn "releases/$release" "$root/current.new"
mv -Tf "$root/current.new" "$root/current"

if ! reload_nginx {{TRIES}}; then
  if [ -n "$previous" ]; then
    ln -sfn "$previous" "$root/current.new"
    mv -Tf "$root/current.new" "$root/current"
  fi
  echo "nginx did not switch to the new front config within {{WAIT}} s; the previous release is current again. See the container's log (docker logs) for nginx's reason." >&2
  exit 4
fi
# Keep the live release and, when it holds the same secrets (a timeout or limit change), the one
# before it as a rollback target. A release with other secrets goes at once: a revoked key or a
# replaced TLS key must not stay on disk. Older releases and their keys go too.
keep=""
if [ -n "$previous" ] && cmp -s "$root/$previous/{{DIGEST}}" "$dir/{{DIGEST}}"; then
  keep=$previous
fi
for d in "$root"/releases/*; do
  name=${d##*/}
  if [ "releases/$name" != "releases/$release" ] && [ "releases/$name" != "$keep" ]; then
    rm -rf "$d"
  fi
done
echo "front config $release is live"
