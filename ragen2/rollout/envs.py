"""Which environments a run uses and how they are made.

``env.id`` is ``ragen2/FrozenLake-v0`` or a user's ``module:Env-v0``; ``env.mix`` names several
envs with shares of each step's groups, and ``env.eval`` the held-out evaluation envs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import gymnasium as gym
import numpy as np


class EnvSpecError(ValueError):
    """``env.id`` or ``env.kwargs`` could not produce an environment."""


@dataclass(frozen=True)
class EnvEntry:
    """One environment of a run: metric name, Gymnasium id, kwargs and share of groups."""

    name: str
    id: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    share: float = 1.0
    format_penalty: float | None = None  # None: rollout.format_penalty


def env_name(env_id: str) -> str:
    """A metric-friendly name for an id: ``ragen2/FrozenLake-v0`` -> ``frozenlake``."""
    base = re.split(r"[/:]", env_id)[-1]
    return re.sub(r"-v\d+$", "", base).lower() or "env"


def train_entries(env_cfg: Any) -> list[EnvEntry]:
    """The training envs of an ``EnvConfig`` (one entry unless ``mix`` is set)."""
    if env_cfg.mix:
        return [EnvEntry(n, e.id, e.kwargs, float(e.share), e.format_penalty)
                for n, e in env_cfg.entries("mix").items()]
    return [EnvEntry(env_name(env_cfg.id), env_cfg.id, dict(env_cfg.kwargs))]


def eval_entries(env_cfg: Any) -> list[EnvEntry]:
    """The held-out evaluation envs (``env.eval``; the training envs when it is empty)."""
    if env_cfg.eval:
        return [EnvEntry(n, e.id, e.kwargs, float(e.share), e.format_penalty)
                for n, e in env_cfg.entries("eval").items()]
    return train_entries(env_cfg)


def all_entries(env_cfg: Any) -> list[EnvEntry]:
    """Training and evaluation envs, each name once (training first)."""
    out: dict[str, EnvEntry] = {}
    for e in train_entries(env_cfg) + eval_entries(env_cfg):
        if e.name in out and (out[e.name].id, out[e.name].kwargs) != (e.id, e.kwargs):
            raise EnvSpecError(f"env name {e.name!r} is used for two different envs "
                               f"({out[e.name].id} and {e.id}): give them distinct names")
        out.setdefault(e.name, e)
    return list(out.values())


def format_penalties(entries: Sequence[EnvEntry], default: float) -> dict[str, float]:
    """The format penalty of each env name (its entry's own, else ``default``)."""
    return {e.name: default if e.format_penalty is None else float(e.format_penalty)
            for e in entries}


def allocate(total: int, shares: Sequence[float]) -> list[int]:
    """Split ``total`` items by ``shares`` (normalised) with the largest-remainder method.

    Deterministic; ties go to the earlier entry. ``allocate(8, [2, 1, 1]) == [4, 2, 2]``.
    """
    w = np.asarray(shares, dtype=np.float64)
    if w.ndim != 1 or len(w) == 0 or (w <= 0).any():
        raise ValueError(f"shares must be a non-empty list of positive numbers, got {list(shares)}")
    exact = total * w / w.sum()
    counts = np.floor(exact).astype(int)
    order = sorted(range(len(w)), key=lambda i: (-(exact[i] - counts[i]), i))
    for i in order[: total - int(counts.sum())]:
        counts[i] += 1
    return [int(c) for c in counts]


def assign(total: int, entries: Sequence[EnvEntry]) -> list[str]:
    """The env name of each of ``total`` slots: contiguous blocks sized by :func:`allocate`."""
    counts = allocate(total, [e.share for e in entries])
    return [e.name for e, c in zip(entries, counts) for _ in range(c)]


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
                           "env.id=<module>:<EnvName-v0>, or an id a module listed in plugins "
                           "registers") from None
    except (TypeError, ValueError) as e:
        raise EnvSpecError(f"env.kwargs={dict(kwargs or {})!r} rejected by {env_id}: {e}") from None
    except AttributeError as e:  # e.g. Gymnasium's checker: no action_space / observation_space
        raise EnvSpecError(f"env.id={env_id!r} is not a complete gymnasium.Env: {e}") from None


def env_factory(env_id: str, kwargs: dict[str, Any] | None = None) -> Callable[[], gym.Env]:
    kwargs = dict(kwargs or {})
    return lambda: make_env(env_id, kwargs)


def probe_env(entry: EnvEntry) -> bool:
    """Make the env and reset it once; fail with :class:`EnvSpecError` on a broken contract.

    Returns whether the env has a ``demonstration()`` hook (used by the warm start).
    """
    env = make_env(entry.id, entry.kwargs)
    try:
        try:
            out = env.reset(seed=0)
        except Exception as e:  # noqa: BLE001  (a user's env: report whatever it raised)
            raise EnvSpecError(f"env {entry.name!r} ({entry.id}) raised in reset(seed=0): "
                               f"{type(e).__name__}: {e}") from e
        if not (isinstance(out, tuple) and len(out) == 2 and isinstance(out[0], str)):
            got = type(out[0]).__name__ if isinstance(out, tuple) and out else type(out).__name__
            raise EnvSpecError(f"env {entry.name!r} ({entry.id}): reset() must return "
                               f"(observation: str, info: dict), got a {got} observation; see "
                               "docs/tutorials/add-an-environment.md")
        return callable(getattr(env.unwrapped, "demonstration", None))
    finally:
        env.close()
