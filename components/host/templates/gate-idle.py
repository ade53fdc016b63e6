# The command of the serving pods' gate sidecar (components/k8s_workload.py), run as `python3 -c`:
# it waits for its SIGTERM; its work is its readiness probe, one run of the gate's checks. These
# comments are not part of it.
import signal; signal.pause()
