"""A text env that knows nothing of ragen2: Gymnasium only, no demonstration() hook, no
instructions or valid_actions (``env.id=tests.plain_env:PlainGuess-v0``)."""

from __future__ import annotations

import gymnasium as gym
from gymnasium import spaces


class PlainGuess(gym.Env):
    def __init__(self) -> None:
        self.observation_space = spaces.Text(max_length=256)
        self.action_space = spaces.Text(max_length=64)
        self.target = 0

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.target = int(self.np_random.integers(3))
        return "Guess the hidden number: 0, 1 or 2.", {}

    def step(self, action):
        win = action.strip() == str(self.target)
        return "Done.", float(win), True, False, {"success": win}


if "PlainGuess-v0" not in gym.registry:
    gym.register(id="PlainGuess-v0", entry_point=PlainGuess)
