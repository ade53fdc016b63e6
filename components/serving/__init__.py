"""What serves, the same on either target: the serving container as the config renders it once
(``spec.py``: ``ServingSpec``) and the image it runs (``image.py``: ``ServingImage``). Both targets
(components/docker/, components/kubernetes/) and the shared floor (the gate, promotion, the probe)
take them from here (see README, "What a stack is made of")."""
