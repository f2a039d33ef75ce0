"""A one-turn env with several right answers, whose expert acts on its reasoning or ignores it.

``env.id=tests.choice_env:ChoiceWord-v0`` with ``env.kwargs.answer=follow|independent``: the
observation lists three allowed words and any of them wins. Both experts reason the same way,
naming one of the three at random ("I pick X."); the ``follow`` expert then answers X, the
``independent`` one answers another uniformly random pick of the three, drawn independently of
what it reasoned. Both always win, and both reason about the input equally; only whether the
action follows the reasoning differs. Used to validate the monitor's I(A; Z | X)
(``collapse/action/*``).
"""

from __future__ import annotations

import random

import gymnasium as gym
from gymnasium import spaces

WORDS = ("red", "green", "blue", "amber", "violet", "silver", "coral", "olive", "ivory", "azure",
         "ochre", "plum")


class ChoiceWord(gym.Env):
    metadata = {"render_modes": []}
    valid_actions = WORDS
    instructions = "Answer with any one of the allowed words."

    def __init__(self, answer: str = "follow") -> None:
        if answer not in ("follow", "independent"):
            raise ValueError(f"answer must be 'follow' or 'independent', got {answer!r}")
        self.answer = answer
        self.observation_space = spaces.Text(max_length=128)
        self.action_space = spaces.Text(max_length=64)
        self._rng = random.Random(20261201)  # the expert's picks: independent of every input
        self.allowed: tuple[str, ...] = WORDS[:3]

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        idx = self.np_random.choice(len(WORDS), size=3, replace=False)
        self.allowed = tuple(WORDS[int(i)] for i in idx)
        return f"The allowed words are {', '.join(self.allowed)}.", {}

    def step(self, action):
        win = action.strip() in self.allowed
        return "Done.", float(win), True, False, {"success": win,
                                                  "action_is_valid": action.strip() in WORDS}

    def demonstration(self) -> tuple[str, str]:
        pick = self._rng.choice(self.allowed)
        said = pick if self.answer == "follow" else self._rng.choice(self.allowed)
        return f"I pick {pick}.", said


if "ChoiceWord-v0" not in gym.registry:
    gym.register(id="ChoiceWord-v0", entry_point=ChoiceWord)
