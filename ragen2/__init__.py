"""ragen2: multi-turn LLM-agent RL that finds and fixes reasoning collapse.

Importing ``ragen2`` registers the bundled Gymnasium environments (``ragen2/FrozenLake-v0``, ...)
from the separately importable package ``ragen2_envs`` (the repository's ``envs/`` folder). A
checkout that is not installed (only on ``PYTHONPATH``) gets ``envs/`` and ``configs/`` under their
installed names from :mod:`ragen2._checkout`.
"""

__version__ = "0.1.0"

try:
    import ragen2_envs as _envs  # noqa: F401  (registers the environments with Gymnasium)
except ModuleNotFoundError as _missing:  # a checkout on PYTHONPATH, not installed
    if _missing.name != "ragen2_envs":
        raise
    from ragen2._checkout import register_checkout_packages

    if "ragen2_envs" not in register_checkout_packages():
        raise
    import ragen2_envs as _envs  # noqa: F401
