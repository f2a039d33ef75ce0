"""A one-turn env whose expert reasons about the input, or recites a template that ignores it.

``env.id=tests.reasoning_env:EchoWord-v0`` with ``env.kwargs.reasoning=describe|template``: the
observation names a secret word and the answer is that word. The ``describe`` expert's reasoning
restates the word; the ``template`` expert's reasoning reads the same way but names a word drawn
at random, independently of the input: varied on the surface, empty of input. The actions are the
expert's in both modes. Used to validate that the MI monitor separates the two policies.
"""

from __future__ import annotations

import random

import gymnasium as gym
from gymnasium import spaces

WORDS = ("red", "green", "blue", "amber", "violet", "silver", "coral", "olive", "ivory", "azure",
         "ochre", "plum")


class EchoWord(gym.Env):
    metadata = {"render_modes": []}
    valid_actions = WORDS
    instructions = "Read the secret word and answer with it."

    def __init__(self, reasoning: str = "describe") -> None:
        if reasoning not in ("describe", "template"):
            raise ValueError(f"reasoning must be 'describe' or 'template', got {reasoning!r}")
        self.reasoning = reasoning
        self.observation_space = spaces.Text(max_length=128)
        self.action_space = spaces.Text(max_length=64)
        self._rng = random.Random(20261130)  # independent of every input
        self.word = WORDS[0]

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.word = WORDS[int(self.np_random.integers(len(WORDS)))]
        return f"The secret word is {self.word}.", {}

    def step(self, action):
        win = action.strip() == self.word
        return "Done.", float(win), True, False, {"success": win, "action_is_valid": action.strip() in WORDS}

    def demonstration(self) -> tuple[str, str]:
        said = self.word if self.reasoning == "describe" else self._rng.choice(WORDS)
        return f"The secret word is {said} so I say {said}.", self.word


if "EchoWord-v0" not in gym.registry:
    gym.register(id="EchoWord-v0", entry_point=EchoWord)
