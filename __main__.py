"""GLM-5.3-Flash behind an OpenAI-compatible API, one stack per environment.

Load the stack's config (validated before anything is created), build the deployment, export what
reviewers and operators need.
"""

import pulumi

from components.config import ConfigError, load_stack_config
from components.deployment import deploy
from components.secrets import Secrets

try:
    config = load_stack_config()
except ConfigError as err:
    # RunError prints the message alone: the user sees what to fix, not a traceback.
    raise pulumi.RunError(str(err)) from None

for advisory in config.advisories():
    pulumi.log.warn(advisory)

outputs = deploy(config, Secrets.from_config(), pulumi.get_stack())

for name, value in outputs.items():
    pulumi.export(name, value)
