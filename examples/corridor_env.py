"""A user's own environment, trained with `env.id=corridor_env:Corridor-v0` and nothing else.

Run from this folder, or from any folder holding a copy of this file (`ragen2 train` imports
`corridor_env` from the working directory, and so do its Ray workers):
    cd examples && ../.venv/bin/ragen2 train env.id=corridor_env:Corridor-v0

The whole recipe: a `gymnasium.Env` with text observations and text actions, registered when
its module is imported. `instructions`, `valid_actions` and `demonstration()` are optional extras
(the system prompt, and warm-start data).
"""

from __future__ import annotations

import string

import gymnasium as gym
from gymnasium import spaces


class CorridorEnv(gym.Env):
    """Walk along a corridor of `length` cells to the goal cell."""

    metadata = {"render_modes": []}
    valid_actions = ("Left", "Right")
    instructions = ("You are in a corridor of cells numbered from 1. P is you, G is the goal. "
                    "Actions: Left, Right. Reaching G gives reward 1.")

    def __init__(self, length: int = 5, max_steps: int = 20) -> None:
        if length < 2:
            raise ValueError(f"length must be >= 2, got {length}")
        self.length, self.max_steps = length, max_steps
        # Text's default charset is letters and digits only: the board's spaces, "_" and "\n"
        # would make Gymnasium's env checker warn on every reset and step
        self.observation_space = spaces.Text(max_length=256, charset=string.printable)
        self.action_space = spaces.Text(max_length=32, min_length=0, charset=string.printable)
        self.pos = self.goal = self.steps = 0

    def _obs(self) -> str:
        cells = ["P" if i == self.pos else "G" if i == self.goal else "_" for i in range(self.length)]
        return f"{' '.join(cells)}\nYou are at cell {self.pos + 1}. The goal is at cell {self.goal + 1}."

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.pos, self.goal = (int(x) for x in self.np_random.choice(self.length, 2, replace=False))
        self.steps = 0
        return self._obs(), {"instructions": self.instructions}

    def step(self, action: str):
        self.steps += 1
        word = action.strip().capitalize()
        valid = word in self.valid_actions
        if valid:
            self.pos = max(0, min(self.length - 1, self.pos + (1 if word == "Right" else -1)))
        success = self.pos == self.goal
        info = {"success": success, "action_is_valid": valid}
        return self._obs(), float(success), success, self.steps >= self.max_steps, info

    def demonstration(self) -> tuple[str, str]:
        action = "Right" if self.goal > self.pos else "Left"
        return (f"I am at cell {self.pos + 1} and the goal is at cell {self.goal + 1}. Go {action}.",
                action)


if "Corridor-v0" not in gym.registry:
    gym.register(id="Corridor-v0", entry_point="corridor_env:CorridorEnv")
