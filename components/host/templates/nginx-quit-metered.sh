# shellcheck shell=sh
# shellcheck disable=SC1083,SC2170 # the doubled braces are placeholders components/template.py fills
# The preStop of a Kubernetes front pod with the usage meter (components/kubernetes/front.py): out
# of its Service first (the pause); then the meter is told (the drain file) and says when no request
# is left in flight (<drain file>.done, meter.lua), or DRAIN_SECONDS pass; then the stack's
# Prometheus gets one more scrape of the final counts and the other front pods one more pull of the
# budgets; then the meter hands the pod's counts to a front pod that stays (meter_handoff.lua) and
# says what happened (<drain file>.handoff.done), or HANDOFF_SECONDS pass; then one more scrape, so
# the heir's copy is read before this pod's series go stale (the usage table counts it from then);
# then nginx's graceful quit, as nginx-quit.sh. One statement a line (one_line_script).
sleep {{PAUSE_SECONDS}};
touch {{DRAIN_FILE}};
waited=0;
while [ ! -e {{DRAIN_FILE}}.done ] && [ "$waited" -lt {{DRAIN_SECONDS}} ]; do sleep 1; waited=$((waited + 1)); done;
sleep {{SCRAPE_SECONDS}};
touch {{DRAIN_FILE}}.handoff;
waited=0;
while [ ! -e {{DRAIN_FILE}}.handoff.done ] && [ "$waited" -lt {{HANDOFF_SECONDS}} ]; do sleep 1; waited=$((waited + 1)); done;
sleep {{SCRAPE_SECONDS}};
nginx -c {{CONF}} -s quit;
while [ -e /tmp/nginx.pid ]; do sleep 1; done
