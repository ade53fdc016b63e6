# The command of the serving pods' gate sidecar (components/kubernetes/workload.py), run as `python3 -c`:
# it writes the pod's "not passed yet" verdict (its argument: the guard answers no inference while
# the file is there), then waits for its SIGTERM; its work is its readiness probe, one run of the
# gate's checks, which removes the file when they pass. These comments are not part of it.
import pathlib, signal, sys; pathlib.Path(sys.argv[1]).write_text("no check has passed yet\n"); signal.pause()
