"""Every random stream of a run is a pure function of (run seed, purpose, position).

Resume therefore needs no hidden generator state: step s of seed k always sees the same env
seeds and sampling seeds. Training env seeds lie in [0, 2**31); held-out evaluation seeds lie in
[2**31, 2**31 + n) and so can never be trained on.
"""

from __future__ import annotations

import numpy as np

TRAIN_SEED_LIMIT = 2**31
EVAL_SEED_BASE = 2**31

_GROUP, _DEMO, _SAMPLE, _EVAL_SAMPLE, _POOL = 1, 2, 3, 4, 6  # 5: filtering.prompt_rng


def _draw(*key: int) -> int:
    return int(np.random.SeedSequence([int(k) for k in key]).generate_state(1, np.uint64)[0]
               % TRAIN_SEED_LIMIT)


def group_seed(seed: int, step: int, group: int) -> int:
    """Env seed shared by every rollout of ``group`` at RL ``step``."""
    return _draw(seed, _GROUP, step, group)


def pool_seed(seed: int, prompt: int) -> int:
    """Env seed of entry ``prompt`` of the fixed prompt pool (tiered SNR filtering)."""
    return _draw(seed, _POOL, prompt)


def demo_seed(seed: int, episode: int) -> int:
    """Env seed of warm-start demonstration ``episode``."""
    return _draw(seed, _DEMO, episode)


def eval_seed(index: int) -> int:
    """Held-out env seed ``index`` (the same set for every run, so runs are comparable)."""
    return EVAL_SEED_BASE + index


def sampling_seed(seed: int, step: int, worker: int) -> int:
    """Sampling seed of one worker's rollout at ``step``."""
    return _draw(seed, _SAMPLE, step, worker)


def eval_sampling_seed(worker: int) -> int:
    """Fixed sampling seed for held-out evaluation (identical before and after RL)."""
    return _draw(0, _EVAL_SAMPLE, worker)
