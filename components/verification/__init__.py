"""What proves a deployment serves right, as the program builds it on either target: the smoke gate's
resource (``smoke_gate.py``), promotion on its evidence (``promotion.py``), and what the semantic
probe is told and the image it runs (``semantic_probe_spec.py``, ``semantic_probe_image.py``).

Their runtimes stand on the ground, plain Python without Pulumi: ``components/gate/`` and
``components/semantic_probe/``, which the probe's image ships.
"""
