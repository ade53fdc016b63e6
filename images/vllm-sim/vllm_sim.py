#!/usr/bin/env python3
"""vllm_sim -- a vLLM-protocol simulator (a test double, NOT a model): ``vllm_sim.py serve <model> ...``.

The entry point of the image (``python3 /app/vllm_sim.py``, and ``vllm`` links here) and of the
tests; the simulator itself is the package :mod:`simulator` beside this file.
"""

import os
import sys

# The package sits beside this file; `python3 -I` (isolated, as the tests run it) leaves the
# script's folder off sys.path, and `vllm` reaches it through a link.
sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))

from simulator.cli import main

if __name__ == "__main__":
    sys.exit(main())
