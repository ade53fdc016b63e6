# shellcheck shell=sh
# shellcheck disable=SC1083 # the doubled braces are placeholders components/template.py fills
# The preStop of nginx in a pod, the Kubernetes front's (components/kubernetes/front.py) and each serving
# pod's guard (components/kubernetes/guard.py), run as one line: out of its Service first (the pause),
# then nginx's graceful quit, which lets the requests in flight finish (SIGTERM is a fast quit that
# cuts them), and wait until the old workers are gone. One statement a line, as
# template.one_line_script joins them; these comments are not part of it.
sleep {{PAUSE_SECONDS}};
nginx -c {{CONF}} -s quit;
while [ -e /tmp/nginx.pid ]; do sleep 1; done
