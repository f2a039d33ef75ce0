"""Every random stream of a run is a pure function of (run seed, purpose, position).

Resume therefore needs no hidden generator state: step s of seed k always sees the same env
seeds and sampling seeds. Training env seeds lie in [0, 2**31); held-out evaluation seeds start at
2**31 and the MI monitor's fixed probe panel's at 2**31 + 2**30. Disjoint seeds are not disjoint
problems (an env generates its problem from the seed): for an env with ``problem_key()`` each
drawn seed is resolved into the training or the held-out part of its problem space
(:mod:`ragen2.rollout.split`, retries from :func:`split_seed`), so no held-out problem is ever
trained on; evaluation and the panel both draw from the held-out part.
"""

from __future__ import annotations

import numpy as np

TRAIN_SEED_LIMIT = 2**31
EVAL_SEED_BASE = 2**31
PANEL_SEED_BASE = 2**31 + 2**30

_GROUP, _DEMO, _SAMPLE, _EVAL_SAMPLE, _POOL, _TURN, _REQUEST = 1, 2, 3, 4, 6, 7, 8  # 5: prompt_rng
_PANEL_SAMPLE, _PANEL_BOOT, _PANEL_TURN_SAMPLE, _PANEL_PREFIX = 9, 10, 11, 12
_SPLIT = 13
REQUEST_SEED_LIMIT = 2**63  # engines take 64-bit seeds: collisions among a step's requests ~1e-13


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


def panel_seed(index: int) -> int:
    """Env seed ``index`` of the MI monitor's probe panel (the same for every run and step)."""
    return PANEL_SEED_BASE + index


def split_seed(seed: int, attempt: int, heldout: bool) -> int:
    """Retry ``attempt`` (1, 2, ...) of env seed ``seed`` when its problem lies in the other part
    of the problem split (:mod:`ragen2.rollout.split`): a training seed's retries stay in
    [0, 2**31), a held-out seed's in [2**31, 2**32)."""
    s = _draw(seed, _SPLIT, attempt)
    return EVAL_SEED_BASE + s if heldout else s


def panel_sampling_seed(seed: int, step: int, worker: int) -> int:
    """Sampling seed of one worker's share of the probe panel's reasoning samples at ``step``."""
    return _draw(seed, _PANEL_SAMPLE, step, worker)


def panel_turn_sampling_seed(seed: int, step: int, worker: int) -> int:
    """Sampling seed of one worker's share of the later-turn panel's samples at ``step``."""
    return _draw(seed, _PANEL_TURN_SAMPLE, step, worker)


def panel_prefix_seed(env_seed: int) -> int:
    """Seed of the random moves in the scripted opening of later-turn panel prompt ``env_seed``
    (independent of the run seed: every run measures the same mid-episode states)."""
    return _draw(0, _PANEL_PREFIX, env_seed)


def panel_bootstrap_seed(seed: int, step: int) -> int:
    """Seed of the probe panel's bootstrap resamples and permutations at ``step``."""
    return _draw(seed, _PANEL_BOOT, step)


def sampling_seed(seed: int, step: int, worker: int) -> int:
    """Sampling seed of one worker's rollout at ``step``."""
    return _draw(seed, _SAMPLE, step, worker)


def turn_seed(worker_seed: int, turn: int, temperature_scale: float = 1.0) -> int:
    """Base sampling seed of one turn's generate call of a worker's rollout (per temperature
    scale, for the tiered SNR perturbation). Hashed, so no two (turn, scale) share a stream."""
    return _draw(worker_seed, _TURN, turn, int(round(temperature_scale * 1e6)))


def request_seed(base: int, index: int) -> int:
    """Seed of request ``index`` of a generate call whose params carry seed ``base``.

    Hashed rather than ``base + index``: with ``base`` stepping by one per turn, episode i at turn
    t + 1 would reuse the stream of episode i + 1 at turn t.
    """
    return int(np.random.SeedSequence([int(base), _REQUEST, int(index)]).generate_state(
        1, np.uint64)[0] % REQUEST_SEED_LIMIT)


def eval_sampling_seed(worker: int) -> int:
    """Fixed sampling seed for held-out evaluation (identical before and after RL)."""
    return _draw(0, _EVAL_SAMPLE, worker)
