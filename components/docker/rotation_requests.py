"""How the semantic probe changes the front's rotation without the Docker socket (issue 23).

The probe container and the front share ONE named Docker volume, ``<container>-rotation-requests``:
at :data:`FRONT_REQUESTS_DIR` in the front, at :data:`PROBE_REQUESTS_DIR` in the probe, and nothing
else of the front is mounted in the probe. The probe writes ``<replica>.req`` files there
(``eject <replica> <since> <text>`` after K failed runs in a row, ``readmit <replica>`` after M passed
ones); a small loop in the front container (``templates/rotation-requests.sh``, started by the
front's command beside nginx, which stays PID 1) applies them with the rotation script itself:

- only ``eject`` and ``readmit``, only for a replica the rotation knows (its ``.address`` file);
- ``eject`` only takes out a replica that is in, and was admitted before the failures began (a
  failure of the container a roll replaced is no evidence against the new one); ``readmit`` only brings back one the probe ejected
  (``<replica>.ejected-by``), which every pulumi change (admit, fail, drain, forget) clears: a
  replica a failed gate or a drain keeps out stays out;
- the 503's text is cut to a small safe alphabet and 400 characters, then wrapped in JSON by the
  front: nothing the probe writes reaches nginx's config unfiltered;
- never a restart: a graceful reload, as for every rotation change.

Holding the Docker socket would be root on the host; this volume gives the probe two verbs.

Why the boundary holds against a compromised probe, which runs as uid 65534, owns the folder and
may put anything in it (issue 33 found the loop following a planted ``gpu01.req`` link to the key
map and logging the key it read):

- What the loop reads is what the probe wrote, nothing else. ``dd iflag=nofollow`` opens the file
  with ``O_NOFOLLOW``: a link as the file's last component fails to open, atomically (a link
  swapped in after any check fails the same way). The folder itself is the volume's mount point,
  which the probe cannot replace with a link, so no earlier component of the path is the probe's.
  A hard link cannot point outside either: the probe sees no path of the front but this volume.
- A FIFO opens non-blocking and reads as empty (refused): the probe cannot stall the loop; a folder
  named ``*.req`` is not removed (``rm -f``) and never read.
- Nothing read reaches the log: a request is refused with the file's name once that name has
  passed the replica alphabet (``[A-Za-z0-9._-]``), else with no name; the verb, time and text are
  never echoed, and ``since`` is checked to be digits before ``rotation.sh`` could echo it.
  So even the probe's own bytes (terminal escapes, a key it holds) stay out of ``docker logs``.
- The loop deletes the link, never its target (``rm`` of a link).
"""

from __future__ import annotations

import base64

from components.docker.nginx_reload import START_VALUES
from components.docker.rotation import SCRIPT as ROTATION_SCRIPT
from components.render.nginx_conf import CONF_ROOT
from components.template import one_line_script, shell_program

FRONT_REQUESTS_DIR = f"{CONF_ROOT}/rotation-requests"
"""Where the front container mounts the requests volume (beside, not inside, the rotation state)."""
PROBE_REQUESTS_DIR = "/run/glm53/rotation-requests"
"""Where the probe container mounts the same volume: the only path it shares with the front."""
RUNTIME_DIR = "/run/glm53"
"""Where the front's command writes the two scripts at start (container-local, not a volume)."""
_SCRIPT_PATH = f"{RUNTIME_DIR}/rotation.sh"
_LOOP_PATH = f"{RUNTIME_DIR}/rotation-requests.sh"
LOOP = shell_program(
    "rotation-requests.sh", {"REQUESTS": FRONT_REQUESTS_DIR, "SCRIPT": _SCRIPT_PATH}, nginx=False
)


def volume_name(stack_container: str) -> str:
    """The shared volume's Docker name, from the serving container's (``glm:container.name``).

    >>> volume_name("glm53-flash-local")
    'glm53-flash-local-rotation-requests'
    """
    return f"{stack_container}-rotation-requests"


def _base64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


FRONT_COMMAND = one_line_script(
    "rotation-requests-start.sh",
    "nginx-start.sh",
    values={
        "RUNTIME_DIR": RUNTIME_DIR,
        "ROTATION_BASE64": _base64(ROTATION_SCRIPT),
        "ROTATION_PATH": _SCRIPT_PATH,
        "LOOP_BASE64": _base64(LOOP),
        "LOOP_PATH": _LOOP_PATH,
        **START_VALUES,
    },
)
"""The front container's command: the request loop in the background, then (after the first
release) nginx as PID 1, exactly as ``nginx_reload.START_COMMAND`` (so ``kill -HUP 1`` still reloads
it); the loop becomes nginx's child and dies with the container."""
