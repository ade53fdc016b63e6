"""vLLM's command line, in one place: what the config renders, and what vLLM's parser accepts.

- ``owned``: the owned-flag table, which ``glm:`` key renders which ``vllm serve`` flag (and the
  key a flag came from, for the gate's messages);
- ``names``: how vLLM's parser reads a token (the one flag-name parser, the one expansion of
  argparse abbreviations);
- ``render``: the flags a config renders, and the argv items they become;
- ``tables``: the real parser's flags per vLLM version (``<version>.json`` here, made by
  ``scripts/vllm_flags.py``);
- ``checks``: what ``glm:serving.extraArgs`` may add, and every flag against the version's table.

Nothing here imports Pulumi or the config package (the config's rules ask this package; a
``StackSections`` is read by attribute). This file imports nothing, so that the gate's image, which
ships ``owned`` for its messages (``components/verification/semantic_probe_image.py``, ``APP_FILES``), ships only
that.
"""
