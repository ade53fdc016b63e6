# shellcheck shell=sh
# shellcheck disable=SC1083 # the doubled braces are placeholders components/template.py fills
# The Prometheus container's command (components/docker/prometheus_release.py), run as one line: wait
# for the first release, then Prometheus as PID 1 (so `kill -HUP 1` reloads it). One statement a
# line, as template.one_line_script joins them; these comments are not part of it.
while [ ! -e {{CONF}} ]; do sleep 0.1; done;
exec {{PROMETHEUS}}
