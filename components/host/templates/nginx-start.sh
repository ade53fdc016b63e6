# shellcheck shell=sh
# shellcheck disable=SC1083 # the doubled braces are placeholders components/template.py fills
# The front container's command (components/docker/nginx_reload.py), run as one line: wait for the first
# release, then nginx as PID 1 (so `kill -HUP 1` reloads it). One statement a line, as
# template.one_line_script joins them; these comments are not part of it.
while [ ! -e {{CONF}} ]; do sleep 0.1; done;
exec nginx -c {{CONF}} -e stderr -g 'daemon off;'
