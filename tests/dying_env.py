"""FrozenLake whose process is killed (SIGKILL) the first time it resets on one seed, for fault tests.

``env.id=tests.dying_env:DyingFrozenLake-v0 env.kwargs.die_on_seed=<seed>``: while the file
:func:`marker_path` ``(seed)`` exists, ``reset(seed=<seed>)`` removes it and kills its own process
(a rollout worker dies mid-rollout, for real). Removing the marker first makes it fire once, even
when several episodes of a group reset that seed concurrently; without the marker the env is plain
FrozenLake, so a run with the same config and no marker is the undisturbed reference.
"""

from __future__ import annotations

import os
import signal
import tempfile

import gymnasium as gym
from ragen2_envs import FrozenLakeTextEnv


def marker_path(seed: int) -> str:
    return os.path.join(tempfile.gettempdir(), f"ragen2-dying-env-{seed}.marker")


class DyingFrozenLake(FrozenLakeTextEnv):
    # not split by problem: the trainer's scratch env would reset the fatal seed in the driver,
    # and the test names the seed its worker runs (ragen2.rollout.split)
    problem_key = None

    def __init__(self, die_on_seed: int = -1, **kwargs) -> None:
        super().__init__(**kwargs)
        self.die_on_seed = die_on_seed

    def reset(self, *, seed=None, options=None):
        if seed == self.die_on_seed:
            try:
                os.unlink(marker_path(seed))
            except FileNotFoundError:
                pass
            else:
                os.kill(os.getpid(), signal.SIGKILL)
        return super().reset(seed=seed, options=options)


if "DyingFrozenLake-v0" not in gym.registry:
    gym.register(id="DyingFrozenLake-v0", entry_point=DyingFrozenLake,
                 kwargs={"size": 4, "hole_prob": 0.1, "random_start_goal": False})
