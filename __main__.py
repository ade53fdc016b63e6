"""GLM-5.3-Flash behind an OpenAI-compatible API, one stack per environment.

Load the stack's config (validated before anything is created), build the deployment, export what
reviewers and operators need.
"""

import os
import signal
import sys

import pulumi

from components.config import ConfigError, load_stack_config
from components.deployment import deploy
from components.secrets import Secrets


def _interrupted(*_: object) -> None:
    """The engine interrupts the program when an update fails (a refused preflight): leave at once,
    exit 130. Raising (KeyboardInterrupt, or SystemExit) printed tracebacks under the real error:
    twice from the main thread, and once from asyncio when the signal landed while it reported a
    dropped task (``Exception ignored in …``), seen at a load of 10."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(130)


signal.signal(signal.SIGINT, _interrupted)

try:
    config = load_stack_config()
except ConfigError as err:
    # Imported here: a stack whose config loads, a Kubernetes one say, never loads the Docker target.
    from components.docker.drain_hook import drain_for_destroy

    # `make destroy` removes the stack whatever its file says; anything else is refused, the
    # message alone: logged here, and exit 32, which the language host reads as "the program said
    # why" (a RunError exits 1 and adds "an unhandled error occurred …").
    if not drain_for_destroy(str(err)):
        pulumi.log.error(str(err))
        raise SystemExit(32) from None
else:
    for advisory in config.advisories():
        pulumi.log.warn(advisory)

    outputs = deploy(config, Secrets.from_config(), pulumi.get_stack())

    for name, value in outputs.items():
        pulumi.export(name, value)
