"""ragen2 environments (installed as ``ragen2_envs``; depends only on gymnasium and numpy).

Importing this package registers the gymnasium ids below; importing it twice is harmless.
"""

import gymnasium

from .code_env import CodeTextEnv
from .countdown import CountdownTextEnv
from .frozenlake import FrozenLakeTextEnv
from .math_env import MathTextEnv
from .sokoban import SokobanTextEnv

__all__ = ["CodeTextEnv", "CountdownTextEnv", "FrozenLakeTextEnv", "MathTextEnv", "SokobanTextEnv", "ENV_IDS"]

#: gymnasium id -> entry point, for every environment this package registers.
ENV_IDS = {
    "ragen2/FrozenLake-v0": "ragen2_envs.frozenlake:FrozenLakeTextEnv",
    "ragen2/Sokoban-v0": "ragen2_envs.sokoban:SokobanTextEnv",
    "ragen2/Math-v0": "ragen2_envs.math_env:MathTextEnv",
    "ragen2/Code-v0": "ragen2_envs.code_env:CodeTextEnv",
    "ragen2/Countdown-v0": "ragen2_envs.countdown:CountdownTextEnv",
}

#: default kwargs registered with an id (as gymnasium does for its own FrozenLake map names), so
#: `env.id=...` alone selects a whole task; `env.kwargs` overrides them.
REGISTERED_KWARGS = {
    # the classic layout: start top-left, goal bottom-right, random holes
    "ragen2/FrozenLake-v0": {"size": 4, "hole_prob": 0.1, "random_start_goal": False},
}

for _env_id, _entry_point in ENV_IDS.items():
    if _env_id not in gymnasium.registry:
        gymnasium.register(id=_env_id, entry_point=_entry_point,
                           kwargs=REGISTERED_KWARGS.get(_env_id, {}))
