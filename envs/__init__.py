"""ragen2 environments (installed as ``ragen2_envs``; depends only on gymnasium and numpy).

Importing this package registers the gymnasium ids below; importing it twice is harmless.
``ragen2/Remote-v0`` (:mod:`ragen2_envs.remote`) is no task of its own but a client of an env
served over HTTP (``ragen2 serve-env``), registered beside them.
"""

import gymnasium

from .code_env import CodeTextEnv
from .countdown import CountdownTextEnv
from .frozenlake import FrozenLakeTextEnv
from .math_env import MathTextEnv
from .remote import RemoteTextEnv
from .sokoban import SokobanTextEnv

__all__ = ["CodeTextEnv", "CountdownTextEnv", "FrozenLakeTextEnv", "MathTextEnv", "SokobanTextEnv",
           "RemoteTextEnv", "ENV_IDS", "REMOTE_ID"]

#: gymnasium id -> entry point, for every task environment this package registers.
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

#: the client of an env served over HTTP (``env.id=ragen2/Remote-v0 env.kwargs.url=...``); not a
#: task, so not in ENV_IDS. Gymnasium's env checker is off: it would only check the client's own
#: spaces, not the served env.
REMOTE_ID = "ragen2/Remote-v0"
if REMOTE_ID not in gymnasium.registry:
    gymnasium.register(id=REMOTE_ID, entry_point="ragen2_envs.remote:RemoteTextEnv",
                       disable_env_checker=True)
