# shellcheck shell=sh
# shellcheck disable=SC1083 # the doubled braces are placeholders components/template.py fills
# The Kubernetes front's preStop (components/k8s_front.py), run as one line: out of its Service
# first (the pause), then nginx's graceful quit (SIGTERM is a fast one), and wait until the old
# workers are gone. One statement a line, as template.one_line_script joins them; these comments are
# not part of it.
sleep {{DRAIN_SECONDS}};
nginx -c {{CONF}} -s quit;
while [ -e /tmp/nginx.pid ]; do sleep 1; done
