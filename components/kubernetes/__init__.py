"""The Kubernetes target (``glm:target.kubernetes``): the same ServingSpec, front, gate and
probe as on Docker hosts, as Kubernetes objects (see README, "What a stack is made of")."""
