# shellcheck shell=sh
# shellcheck disable=SC1083 # the doubled braces are placeholders components/template.py fills
# The front's rotation: which replicas nginx sends requests to. Run inside the front container by
# components/docker/rotation.py, as `sh -c "<this file>" sh COMMAND REPLICA [ARGS]`:
#
#   admit  REPLICA ADDRESS        REPLICA (vLLM at ADDRESS, host:port) is in rotation: its gate passed
#   drain  REPLICA REASON GRACE   out of rotation; returns once every request nginx began before is
#                                 finished, or after GRACE seconds
#   fail   REPLICA REASON         out of rotation at once (its gate failed)
#   forget REPLICA GRACE          drained, then no longer listed (the host left the stack)
#   show                          the state, one line per replica
#   eject  REPLICA SINCE TEXT     out of rotation at once, by the semantic probe: only a replica in
#                                 rotation since before SINCE (epoch seconds: when the failures it
#                                 saw began); TEXT is the 503's message, from a small safe alphabet
#   readmit REPLICA               back in at its address, only if the probe ejected it and nothing
#                                 (a gate, a drain) changed it since
#
# eject and readmit are what the front's request loop runs for the probe (rotation-requests.sh);
# every other command is pulumi's and clears the probe's mark ({{ROOT}}/<replica>.ejected-by), so
# the probe can never re-admit a replica that a failed gate or a drain keeps out.
#
# REASON is the JSON body the front answers (503) while no replica is in rotation. The state lives
# beside the front's releases, so a config release (keys, TLS, limits) never changes it:
#   {{ROOT}}/<replica>.address   host:port      {{ROOT}}/<replica>.state   in | out
#   {{ROOT}}/<replica>.reason    the JSON body  {{ROOT}}/upstream.conf     what nginx.conf includes
#   {{ROOT}}/reason.map          the body of the 503 when no replica is in rotation
#   {{ROOT}}/replicas.map        how many replicas are in (the usage meter shares their slots)
#   {{ROOT}}/routes.conf         each replica in rotation's own upstream, the others its backups, and
#   {{ROOT}}/routes.map          their names: prefix affinity's choice (components/host/meter/meter_route.lua)
#   {{ROOT}}/<replica>.events.<event>   how many times, and when last (epoch seconds)
# and, for the stack's Prometheus (the front serves it on its private status port), the state and
# the history of every replica: {{STATUS}}/rotation.prom.
set -eu
root={{ROOT}}
status={{STATUS}}
conf={{CURRENT_CONF}}
command=$1
replica=${2:-}
mkdir -p "$root"
umask 077

# One change at a time: pulumi may drain one replica while it admits another.
lock=$root/.lock
tries=0
until mkdir "$lock" 2>/dev/null; do
  tries=$((tries + 1))
  if [ "$tries" -gt 1200 ]; then
    echo "the front's rotation is locked by another change for 60 s ($lock); remove it if no pulumi up is running" >&2
    exit 5
  fi
  sleep 0.05
done
trap 'rmdir "$lock"' EXIT

# Counts one event of the replica: gate_passed, gate_failed, drained, ejected or readmitted.
record() {
  f=$root/$replica.events.$1
  n=$(cut -d' ' -f1 "$f" 2>/dev/null || echo 0)
  echo "$((n + 1)) $(date +%s)" > "$f"
}

# The rotation in Prometheus' text format, readable by nginx's workers (they serve it).
publish() {
  mkdir -p "$status"
  # nginx's workers (nobody) serve it: they traverse the config root (listing nothing) and read this.
  chmod go+x "${status%/*}"
  chmod 755 "$status"
  {
    echo "# HELP glm_rotation_in 1 while the replica is in the front's rotation (receives requests), 0 while out."
    echo "# TYPE glm_rotation_in gauge"
    for f in "$root"/*.address; do
      [ -e "$f" ] || continue
      name=${f##*/}
      name=${name%.address}
      v=0
      if [ "$(cat "$root/$name.state" 2>/dev/null)" = in ]; then v=1; fi
      echo "glm_rotation_in{host=\"$name\"} $v"
    done
    echo "# HELP glm_rotation_events_total Rotation changes of each replica: gate_passed (admitted), gate_failed (kept out), drained (before its container went), ejected and readmitted (by the semantic probe)."
    echo "# TYPE glm_rotation_events_total counter"
    for f in "$root"/*.events.*; do
      [ -e "$f" ] || continue
      base=${f##*/}
      echo "glm_rotation_events_total{host=\"${base%%.events.*}\",event=\"${base##*.events.}\"} $(cut -d' ' -f1 "$f")"
    done
    echo "# HELP glm_rotation_last_event_timestamp_seconds When each replica's event last happened."
    echo "# TYPE glm_rotation_last_event_timestamp_seconds gauge"
    for f in "$root"/*.events.*; do
      [ -e "$f" ] || continue
      base=${f##*/}
      echo "glm_rotation_last_event_timestamp_seconds{host=\"${base%%.events.*}\",event=\"${base##*.events.}\"} $(cut -d' ' -f2 "$f")"
    done
  } > "$status/rotation.prom.new"
  chmod 644 "$status/rotation.prom.new"
  mv -f "$status/rotation.prom.new" "$status/rotation.prom"
}

# upstream.conf, reason.map, replicas.map, routes.conf and routes.map from the per-replica files; nginx -t;
# then a graceful reload.
# Sets $old to the workers that served before the reload (reload_nginx).
render() {
  : > "$root/upstream.conf.new"
  : > "$root/routes.conf.new"
  names=""
  reason=""
  latest=""
  serving=0
  for f in "$root"/*.address; do
    [ -e "$f" ] || continue
    name=${f##*/}
    name=${name%.address}
    if [ "$(cat "$root/$name.state" 2>/dev/null)" = in ]; then
      echo "{{SERVER_IN}}" >> "$root/upstream.conf.new"
      serving=$((serving + 1))
      names="$names $name"
      {
        echo "{{GROUP_OPEN}}"
        echo "{{GROUP_SERVER}}"
        for g in "$root"/*.address; do
          other=${g##*/}
          other=${other%.address}
          if [ "$other" != "$name" ] && [ "$(cat "$root/$other.state" 2>/dev/null)" = in ]; then
            echo "{{GROUP_BACKUP}}"
          fi
        done
        echo "{{GROUP_CLOSE}}"
      } >> "$root/routes.conf.new"
    else
      echo "{{SERVER_OUT}}" >> "$root/upstream.conf.new"
      # The latest reason: the replica whose failure or drain came last.
      # shellcheck disable=SC3013 # -nt: dash (the front image's sh) and busybox have it
      if [ -s "$root/$name.reason" ] && { [ -z "$reason" ] || [ "$root/$name.reason" -nt "$latest" ]; }; then
        reason=$(cat "$root/$name.reason")
        latest=$root/$name.reason
      fi
    fi
  done
  : > "$root/reason.map.new"
  if [ "$serving" = 0 ] && [ -n "$reason" ]; then
    printf "glm '%s';\n" "$reason" > "$root/reason.map.new"
  fi
  echo "glm $serving;" > "$root/replicas.map.new"
  echo "glm \"${names# }\";" > "$root/routes.map.new"
  for f in upstream.conf reason.map replicas.map routes.conf routes.map; do
    if [ -e "$root/$f" ]; then cp "$root/$f" "$root/$f.previous"; else : > "$root/$f.previous"; fi
    mv -f "$root/$f.new" "$root/$f"
  done
  old=""
  if [ ! -e "$conf" ] || ! is_master; then
    publish
    echo "rotation: $serving replica(s) in; nginx not started yet"
    return 0
  fi
  if ! out=$(nginx -t -q -e stderr -c "$conf" 2>&1); then
    for f in upstream.conf reason.map replicas.map routes.conf routes.map; do mv -f "$root/$f.previous" "$root/$f"; done
    printf 'nginx -t refused the new rotation, so it was not loaded; the front keeps its current one.\n%s\n' "$out" >&2
    exit 3
  fi
  if ! reload_nginx {{TRIES}}; then
    echo "nginx did not load the new rotation within {{WAIT}} s; see the front's log (docker logs)" >&2
    exit 4
  fi
  publish
  echo "rotation: $serving replica(s) in"
}

# Old workers exit once the requests they began are finished (streams included).
wait_for() {
  grace=$1
  started=$(date +%s)
  while [ -n "$(alive "$old")" ]; do
    if [ $(($(date +%s) - started)) -ge "$grace" ]; then
      echo "drained after ${grace} s with requests still open (bounded by glm:container.stopGraceSeconds)"
      return 0
    fi
    sleep 0.05
  done
  echo "drained: every request begun before is finished ($(($(date +%s) - started)) s)"
}

known() {
  if [ ! -e "$root/$replica.address" ]; then
    echo "rotation: no replica named $replica in this front's rotation" >&2
    exit 6
  fi
}

case "$command" in
  admit | drain | fail | forget) rm -f "$root/$replica.ejected-by" ;;
esac

case "$command" in
  eject)
    known
    if [ "$(cat "$root/$replica.state" 2>/dev/null)" != in ]; then
      echo "rotation: $replica is not in rotation; nothing to eject"
      exit 0
    fi
    case "$3" in
      "" | *[!0-9]*) echo "rotation: eject needs SINCE in epoch seconds, got '$3'" >&2; exit 2 ;;
    esac
    admitted=$(date -r "$root/$replica.state" +%s)
    if [ "$admitted" -ge "$3" ]; then
      # A failure seen before the admission (the old container, during a roll) is no evidence.
      echo "rotation: $replica was admitted at $admitted, not before the failures began ($3); not ejected"
      exit 0
    fi
    text=$(printf '%s' "$4" | tr -cd 'A-Za-z0-9 ._:,()=/+-' | cut -c1-400)
    printf '{"error":{"message":"No model replica is serving: %s","type":"server_error","param":null,"code":"no_replica_in_rotation"}}\n' "$text" > "$root/$replica.reason"
    echo semantic-probe > "$root/$replica.ejected-by"
    echo out > "$root/$replica.state"
    record ejected
    render
    ;;
  readmit)
    known
    if [ ! -e "$root/$replica.ejected-by" ]; then
      echo "rotation: $replica was not ejected by the probe (or a gate or drain changed it since); not re-admitted"
      exit 0
    fi
    rm -f "$root/$replica.ejected-by" "$root/$replica.reason"
    echo in > "$root/$replica.state"
    record readmitted
    render
    ;;
  admit)
    printf '%s\n' "$3" > "$root/$replica.address"
    echo in > "$root/$replica.state"
    rm -f "$root/$replica.reason"
    record gate_passed
    render
    ;;
  drain | fail)
    printf '%s\n' "$3" > "$root/$replica.reason"
    was=$(cat "$root/$replica.state" 2>/dev/null || true)
    echo out > "$root/$replica.state"
    if [ "$command" = fail ]; then record gate_failed; else record drained; fi
    render
    if [ "$command" = drain ] && [ "$was" = in ]; then wait_for "$4"; fi
    ;;
  forget)
    was=$(cat "$root/$replica.state" 2>/dev/null || true)
    rm -f "$root/$replica.address" "$root/$replica.state" "$root/$replica.reason" "$root/$replica".events.*
    render
    if [ "$was" = in ]; then wait_for "$3"; fi
    ;;
  show)
    for f in "$root"/*.state; do
      [ -e "$f" ] || continue
      name=${f##*/}
      echo "${name%.state} $(cat "$f") $(cat "$root/${name%.state}.address" 2>/dev/null || echo -)"
    done
    ;;
  *)
    echo "rotation: unknown command $command" >&2
    exit 2
    ;;
esac
