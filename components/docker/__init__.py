"""The Docker target: the Pulumi components and dynamic providers that run a stack on Docker
hosts over SSH (see README, "What a stack is made of")."""
