"""A user-style env (no ragen2 import) that raises on some seeds, for fault tests.

``env.id=tests.flaky_env:Flaky-v0``: seeds with ``seed % fail_every == 1`` raise in ``reset`` (an
untrained model rarely produces a parsable answer, so a failure in ``step`` would be left to chance;
the runner's tests cover ``step``).
"""

import gymnasium as gym


class FlakyEnv(gym.Env):
    observation_space = gym.spaces.Text(128, charset="SayLeftorRight. ")
    action_space = gym.spaces.Text(128)

    def __init__(self, fail_every: int = 2):
        self.fail_every, self.seed_, self.steps = fail_every, 0, 0

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.seed_, self.steps = int(seed or 0), 0
        if self.seed_ % self.fail_every == 1:
            raise RuntimeError(f"flaky env failed on seed {self.seed_}")
        return "Say Left or Right.", {"instructions": "Reply with Left or Right."}

    def step(self, action):
        self.steps += 1
        win = action.strip() == "Left"
        return "Again.", float(win), win or self.steps >= 2, False, {"success": win}


if "Flaky-v0" not in gym.registry:
    gym.register(id="Flaky-v0", entry_point=FlakyEnv)
