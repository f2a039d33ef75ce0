"""ragen2: multi-turn LLM-agent RL that finds and fixes reasoning collapse.

Importing ``ragen2`` registers the bundled Gymnasium environments (``ragen2/FrozenLake-v0``, ...)
from the separately importable package ``ragen2_envs`` (the repository's ``envs/`` folder).
"""

__version__ = "0.1.0"

import ragen2_envs as _envs  # noqa: F401  (registers the environments with Gymnasium)
