"""Making environments from ``env.id`` (``ragen2/FrozenLake-v0`` or a user's ``module:Env-v0``)."""

from __future__ import annotations

from typing import Any, Callable

import gymnasium as gym


class EnvSpecError(ValueError):
    """``env.id`` or ``env.kwargs`` could not produce an environment."""


def make_env(env_id: str, kwargs: dict[str, Any] | None = None) -> gym.Env:
    """``gymnasium.make`` with ragen2's envs registered and a clear error on a bad id or kwarg.

    ``module:EnvName-v0`` imports ``module`` first (Gymnasium's module-prefix form), so a user's
    env registered at import time of their own module needs no edit inside ragen2.
    """
    import ragen2_envs  # noqa: F401  (registers ragen2/*)

    try:
        return gym.make(env_id, **dict(kwargs or {}))
    except (gym.error.Error, ModuleNotFoundError, ImportError) as e:
        ours = ", ".join(k for k in gym.registry if k.startswith("ragen2/"))
        raise EnvSpecError(f"env.id={env_id!r} could not be made ({type(e).__name__}: {e}). "
                           f"Registered ragen2 envs: {ours}; a user env: "
                           "env.id=<module>:<EnvName-v0>") from None
    except (TypeError, ValueError) as e:
        raise EnvSpecError(f"env.kwargs={dict(kwargs or {})!r} rejected by {env_id}: {e}") from None


def env_factory(env_id: str, kwargs: dict[str, Any] | None = None) -> Callable[[], gym.Env]:
    kwargs = dict(kwargs or {})
    return lambda: make_env(env_id, kwargs)
