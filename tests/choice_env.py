"""A one-turn env with several right answers, whose expert acts on its reasoning or ignores it.

``env.id=tests.choice_env:ChoiceWord-v0`` with ``env.kwargs.answer=follow|independent``: the
action ``say X`` wins for any of the twelve valid words X (the prompt names none of them: the
policy learns them from the demonstrations). Both experts reason the same way, naming one word at
random and writing it three times (``I will answer / say X / say X / say X``); the ``follow``
expert then answers ``say X``, the ``independent`` one ``say Y`` with Y another uniformly random
pick, drawn independently of what it reasoned. Both always win and reason alike; only whether the
action follows the reasoning differs. Used to validate the monitor's I(A; Z | X)
(``collapse/action/*``). The observation only numbers the round (so every group has its own
prompt); it carries nothing else.

Why this shape (each measured once with the test's warm start on 2 CPU cores): the tiny model is
slow to learn to copy its own pick. With allowed words listed in the observation it learned
nothing (a different three per prompt: success 0.25, chance) or, with the same three or six
listed, a ``follow`` policy that won but whose answers ignored its pick (I(A; Z | X) 0.00 and
0.09 nats). With unlisted words and bare-word answers (``I pick X so I say X.``, then ``X``) its
answers stayed independent of the pick (0.00 nats for six words, 0.13 for twelve), and with one
``say X`` in the reasoning before the answer ``say X`` (the same tokens before the word both
times) still 0.00. Writing the pick three times gives the copy enough to learn from: 0.42 nats
with 2048 demonstrations, 1.06 of a bound of 1.33 with 4096 (warm-start lr 3e-3; at that lr the
copy is learned in a late, seed-dependent jump, so the test runs lr 1e-3: its comment has the
measurements).
"""

from __future__ import annotations

import random

import gymnasium as gym
from gymnasium import spaces

WORDS = ("red", "green", "blue", "amber", "violet", "silver", "coral", "olive", "ivory", "azure",
         "ochre", "plum")
ALLOWED = WORDS


class ChoiceWord(gym.Env):
    metadata = {"render_modes": []}
    valid_actions = WORDS
    instructions = "Answer with say and any word you know; every one of them wins."

    def __init__(self, answer: str = "follow") -> None:
        if answer not in ("follow", "independent"):
            raise ValueError(f"answer must be 'follow' or 'independent', got {answer!r}")
        self.answer = answer
        self.observation_space = spaces.Text(max_length=128)
        self.action_space = spaces.Text(max_length=64)
        self._rng = random.Random(0)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        round_no = int(self.np_random.integers(1000))
        # the expert's picks: a stream of their own per episode (an env instance may be made
        # afresh for every episode), hidden from the policy
        self._rng = random.Random(int(self.np_random.integers(2**62)))
        return f"Round {round_no}: pick a word.", {}

    def step(self, action):
        words = action.split()
        valid = len(words) == 2 and words[0] == "say" and words[1] in WORDS
        win = valid and words[1] in ALLOWED
        return "Done.", float(win), True, False, {"success": win, "action_is_valid": valid}

    def demonstration(self) -> tuple[str, str]:
        pick = self._rng.choice(ALLOWED)
        said = pick if self.answer == "follow" else self._rng.choice(ALLOWED)
        return f"I will answer\nsay {pick}\nsay {pick}\nsay {pick}", f"say {said}"


if "ChoiceWord-v0" not in gym.registry:
    gym.register(id="ChoiceWord-v0", entry_point=ChoiceWord)
