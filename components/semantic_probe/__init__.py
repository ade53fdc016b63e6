"""The semantic probe: after the deploy, the gate's own checks keep running (issue 18).

vLLM's ``/health`` stayed 200 while CUDA errors broke every answer (vLLM #24207), and ``/version``
answered while the engine was dead (#39863). So a container of the stack asks the model, through
the front and under its own API key, what the gate asked it at deploy time (readiness, 13x17 with
the reasoning in its own field, a tool call, the KV pool), one request at a time, and exports the
verdicts to the stack's Prometheus, whose rules alert after K failed runs in a row. It asks every
replica directly as well (issue 23), labels each result with its ``host``, skips a saturated
replica, and takes one that fails K runs in a row out of the front's rotation (and back after K
passes) through the front's requests volume (components/docker/rotation_requests.py), never the Docker
socket.

- ``settings.py``: what the probe is told (``params.json``) and the targets it asks;
- ``service.py``: the loops and their metrics, plain Python (runs in the probe container);
- ``saturation.py``: when a saturated target is left alone, and for how many runs in a row;
- ``ejection.py``: the eject/readmit requests (runs in the probe container);
- ``__main__.py``: ``python -m components.semantic_probe`` (the container's entrypoint);
- the program's side is outside the package, which the image ships whole:
  ``components/verification/semantic_probe_spec.py`` (what the probe is told), ``components/verification/semantic_probe_image.py``
  (its image), ``components/docker/semantic_probe.py`` and ``components/kubernetes/semantic_probe.py`` (its
  container on each target).

Importing this package imports neither Pulumi nor prometheus_client.
"""

METRIC_PREFIX = "glm_semantic_probe"
PROBE_STEPS = ("readiness", "arithmetic", "tool_call", "kv_pool")
"""What each run checks, in order: the gate's steps that say whether the model answers right."""
SCRAPE_JOB = "semantic-probe"
"""Prometheus job of the probe's /metrics (the alert rules select it)."""


def container_name(stack_container: str) -> str:
    """Docker name of the probe container, from the serving container's (``glm:container.name``).

    >>> container_name("glm53-flash-local")
    'glm53-flash-local-semantic-probe'
    """
    return f"{stack_container}-semantic-probe"


def scrape_target(stack_container: str, port: int) -> str:
    """``host:port`` where the stack's Prometheus scrapes the probe on the private network."""
    return f"{container_name(stack_container)}:{port}"
