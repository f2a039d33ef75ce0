"""The problem split (``ragen2.rollout.split``): held-out problems are never trained on.

Every registered env is split into disjoint, non-empty parts (enumerated where the env lists its
space, else over a few hundred resolved seeds); ``part_of`` and ``resolve_seed`` by hand; the
start-up check's messages; distinct held-out evaluation problems."""

from __future__ import annotations

import hashlib

import gymnasium as gym
import pytest

from ragen2 import seeding
from ragen2.config import ConfigError, EnvConfig
from ragen2.rollout.envs import EnvEntry, make_env
from ragen2.rollout.split import (HELDOUT, TRAIN, ProblemSplit, SplitError, check_split, part_of,
                                  resolve_seed)
from ragen2_envs.math_env import SAMPLE_DATASET


# ------------------------------------------------------------------------------- part_of
def _unit(key: str) -> float:
    return int(hashlib.sha256(key.encode()).hexdigest()[:16], 16) / 2**64


def test_part_of_thresholds_the_sha256_of_the_key():
    key = "math:What is 3 + 4?"
    u = _unit(key)
    # pinned: another hash (or Python's salted hash()) would move problems between the parts
    assert u == pytest.approx(0.85010986, abs=1e-8)
    assert part_of(key, u + 1e-9) == HELDOUT
    assert part_of(key, u) == TRAIN  # held out below the threshold only
    assert part_of(key, 0.2) == TRAIN and part_of(key, 0.9) == HELDOUT


def test_part_of_holds_out_about_the_fraction_and_nests():
    keys = [f"k{i}" for i in range(20_000)]
    for f in (0.1, 0.2, 0.5):
        held = {k for k in keys if part_of(k, f) == HELDOUT}
        assert abs(len(held) / len(keys) - f) < 0.015
    small = {k for k in keys if part_of(k, 0.1) == HELDOUT}
    large = {k for k in keys if part_of(k, 0.3) == HELDOUT}
    assert small < large  # a key held out at one fraction stays held out at a larger one


# --------------------------------------------------------------------------- resolve_seed
class Counted(gym.Env):
    """Problem ``seed % problems`` (its key ``p<n>``); counts resets."""

    def __init__(self, problems: int = 10, keyed: bool = True) -> None:
        self.problems, self.resets, self.problem = problems, 0, None
        if not keyed:
            self.problem_key = None  # opted out

    def reset(self, *, seed=None, options=None):
        self.resets += 1
        self.problem = seed % self.problems
        return f"problem {self.problem}", {}

    def problem_key(self) -> str:
        return f"p{self.problem}"


def test_resolve_seed_keeps_a_seed_already_in_its_part_and_retries_the_others():
    env, f = Counted(), 0.5
    parts = {p: part_of(f"p{p}", f) for p in range(10)}
    assert set(parts.values()) == {TRAIN, HELDOUT}
    train_seed = next(s for s in range(100) if parts[s % 10] == TRAIN)
    assert resolve_seed(env, train_seed, TRAIN, f) == train_seed
    other = next(s for s in range(100) if parts[s % 10] == HELDOUT)
    got = resolve_seed(env, other, TRAIN, f)
    attempt = next(a for a in range(1, 100)
                   if parts[seeding.split_seed(other, a, False) % 10] == TRAIN)
    assert got == seeding.split_seed(other, attempt, False)  # the first retry that lands
    assert 0 <= got < 2**31 and parts[got % 10] == TRAIN
    assert resolve_seed(Counted(), other, TRAIN, f) == got  # deterministic, any instance


def test_held_out_seeds_resolve_at_or_above_two_to_the_31():
    env, f = Counted(), 0.3
    for i in range(200):
        s = resolve_seed(env, seeding.eval_seed(i), HELDOUT, f)
        assert 2**31 <= s < 2**32 and part_of(f"p{s % 10}", f) == HELDOUT
        t = resolve_seed(env, seeding.group_seed(0, 1, i), TRAIN, f)
        assert 0 <= t < 2**31 and part_of(f"p{t % 10}", f) == TRAIN


def test_a_part_no_seed_reaches_is_a_clear_error():
    env = Counted(problems=1)  # one problem: one part is empty
    part = part_of("p0", 0.2)
    empty = HELDOUT if part == TRAIN else TRAIN
    seed = seeding.eval_seed(0) if empty == HELDOUT else 0
    name = {TRAIN: "training", HELDOUT: "held-out"}[empty]
    with pytest.raises(SplitError,
                       match=rf"none of 20 seeds .* {name} part .*heldout_fraction=0.2"):
        resolve_seed(env, seed, empty, 0.2, max_attempts=20)
    assert env.resets == 20


def test_seeds_on_the_wrong_side_of_two_to_the_31_are_refused():
    with pytest.raises(ValueError, match="not a train seed"):
        resolve_seed(Counted(), seeding.eval_seed(0), TRAIN, 0.2)
    with pytest.raises(ValueError, match="not a heldout seed"):
        resolve_seed(Counted(), 5, HELDOUT, 0.2)


def test_an_env_without_problem_key_is_not_split():
    env = Counted(keyed=False)
    assert resolve_seed(env, 7, TRAIN, 0.5) == 7
    assert resolve_seed(env, seeding.eval_seed(3), HELDOUT, 0.5) == seeding.eval_seed(3)
    assert env.resets == 0


# -------------------------------------------------------------------- every registered env
ENV_CASES = [
    ("ragen2/Math-v0", {"difficulty": 1, "max_operand": 2}, 0.2),
    ("ragen2/Math-v0", {"difficulty": 1, "max_operand": 9}, 0.2),
    ("ragen2/Math-v0", {"difficulty": 1, "max_operand": 9}, 0.35),
    ("ragen2/Math-v0", {"difficulty": 1, "max_operand": 20}, 0.2),
    ("ragen2/Math-v0", {"difficulty": 1}, 0.2),
    ("ragen2/Math-v0", {"difficulty": 2}, 0.2),
    ("ragen2/Math-v0", {"difficulty": 3}, 0.2),
    ("ragen2/Math-v0", {"dataset_path": str(SAMPLE_DATASET)}, 0.5),  # 8 problems
    ("ragen2/Countdown-v0", {}, 0.2),
    ("ragen2/Code-v0", {}, 0.2),
    ("ragen2/Code-v0", {"difficulty": 1}, 0.2),
    ("ragen2/Code-v0", {"difficulty": 2}, 0.2),
    ("ragen2/Code-v0", {"difficulty": 3}, 0.2),
    ("ragen2/FrozenLake-v0", {}, 0.2),  # the registered default: 4x4, fixed start and goal
    ("ragen2/FrozenLake-v0", {"random_start_goal": True}, 0.2),
    ("ragen2/Sokoban-v0", {}, 0.2),
]


def _key(env: gym.Env, seed: int) -> str:
    env.reset(seed=seed)
    return env.unwrapped.problem_key()


def test_every_registered_env_is_covered():
    import ragen2_envs

    assert {case[0] for case in ENV_CASES} == set(ragen2_envs.ENV_IDS)


@pytest.mark.parametrize("env_id,kwargs,fraction", ENV_CASES,
                         ids=[f"{c[0].split('/')[1]}-{c[1]}-{c[2]}" for c in ENV_CASES])
def test_training_and_held_out_problems_are_disjoint(env_id, kwargs, fraction):
    entry = EnvEntry("e", env_id, kwargs)
    split = ProblemSplit([entry], fraction)
    fresh = make_env(env_id, kwargs)  # an instance the split never touched
    keys = split.keys("e")
    n = 200
    train = {_key(fresh, split.resolve("e", seeding.group_seed(3, step, g), TRAIN))
             for step in range(n // 8) for g in range(8)}
    if keys is not None:  # enumerated: the parts of the whole space
        parts = {k: part_of(k, fraction) for k in keys}
        held_part = {k for k, p in parts.items() if p == HELDOUT}
        assert held_part and len(held_part) < len(keys)
        assert train <= set(keys) - held_part  # every drawn problem is listed, and trainable
        count = min(len(held_part), 64)
        held = {_key(fresh, s) for s in split.eval_seeds("e", count)}
        assert len(held) == count and held <= held_part  # distinct held-out problems
    else:
        held = {_key(fresh, split.resolve("e", seeding.eval_seed(i), HELDOUT)) for i in range(n)}
        panel = {_key(fresh, split.resolve("e", seeding.panel_seed(i), HELDOUT)) for i in range(64)}
        held |= panel
        assert len(held) > 1
    assert train and held and not train & held
    assert all(part_of(k, fraction) == TRAIN for k in train)
    assert all(part_of(k, fraction) == HELDOUT for k in held)


def test_problem_keys_are_the_same_problem_under_other_kwargs():
    """The key names the problem, not the env's settings: one-digit problems keep their key at
    max_operand=99, so an eval env with other kwargs still never sees a trained problem."""
    small = set(make_env("ragen2/Math-v0", {"max_operand": 9}).unwrapped.problem_keys())
    large = set(make_env("ragen2/Math-v0", {"max_operand": 99, "max_attempts": 1})
                .unwrapped.problem_keys())
    assert len(small) == 162 and small < large


# ----------------------------------------------------------- distinct held-out evaluation
def test_one_digit_math_evaluates_every_held_out_problem_once_in_a_fixed_order():
    entry = EnvEntry("math", "ragen2/Math-v0", {"difficulty": 1, "max_operand": 9})
    split = ProblemSplit([entry], 0.35)
    assert split.sizes("math") == (107, 55)
    seeds = split.eval_seeds("math", 55)
    env = make_env(entry.id, entry.kwargs)
    keys = [_key(env, s) for s in seeds]
    assert len(set(keys)) == 55 == len(seeds)
    assert seeds == ProblemSplit([entry], 0.35).eval_seeds("math", 55)  # every run the same
    assert seeds[:10] == split.eval_seeds("math", 10)  # a shorter evaluation is a prefix
    with pytest.raises(SplitError, match="asks env 'math' .* for 56 distinct .* has 55 of its 162"):
        split.eval_seeds("math", 56)


def test_mixed_eval_entries_split_each_env_by_share():
    math = EnvEntry("math", "ragen2/Math-v0", {"difficulty": 1, "max_operand": 9})
    lake = EnvEntry("lake", "ragen2/FrozenLake-v0", {})
    split = ProblemSplit([math, lake], 0.35)
    specs = split.eval_specs([math, lake], 20)
    assert [s.env for s in specs] == ["math"] * 10 + ["lake"] * 10
    assert [s.group_id for s in specs] == list(range(20))
    assert [s.env_seed for s in specs[:10]] == split.eval_seeds("math", 10)
    # an env that does not enumerate runs the resolved seed of its global episode index
    assert [s.env_seed for s in specs[10:]] == [
        split.resolve("lake", seeding.eval_seed(i), HELDOUT) for i in range(10, 20)]


# -------------------------------------------------------------------- the start-up check
def _env_cfg(env_id: str, kwargs: dict, fraction: float = 0.2) -> EnvConfig:
    return EnvConfig(id=env_id, kwargs=kwargs, heldout_fraction=fraction)


def test_an_empty_held_out_part_fails_at_start_up_naming_the_sizes():
    with pytest.raises(SplitError, match=r"its 2 problems split into 2 for training and 0 held "
                                         r"out at env.heldout_fraction=0.2, so the held-out part "
                                         r"is empty: raise env.heldout_fraction"):
        check_split(_env_cfg("ragen2/Math-v0", {"max_operand": 1}), 1)
    # the 8-problem GSM8K sample holds none out at 0.2, one at 0.3
    with pytest.raises(SplitError, match="its 8 problems split into 8 for training and 0 held"):
        check_split(_env_cfg("ragen2/Math-v0", {"dataset_path": str(SAMPLE_DATASET)}), 1)
    check_split(_env_cfg("ragen2/Math-v0", {"dataset_path": str(SAMPLE_DATASET)}, 0.3), 1)


def test_an_empty_training_part_fails_at_start_up():
    with pytest.raises(SplitError, match="so the training part is empty: lower"):
        check_split(_env_cfg("ragen2/Math-v0", {"max_operand": 1}, 0.99), 1)


def test_more_eval_episodes_than_held_out_problems_fail_at_start_up():
    cfg = _env_cfg("ragen2/Math-v0", {"difficulty": 1, "max_operand": 9})
    with pytest.raises(SplitError, match=r"asks env 'math' \(ragen2/Math-v0, .*\) for 128 distinct "
                                         r"held-out problems .* has 33 of its 162 problems at "
                                         r"env.heldout_fraction=0.2: lower trainer.eval_episodes "
                                         r"\(to at most 33"):
        check_split(cfg, 128)
    check_split(cfg, 33)


def test_a_mixture_is_checked_per_eval_entry():
    cfg = EnvConfig(id=None, mix={"lake": {"id": "ragen2/FrozenLake-v0"}},
                    eval={"code": {"id": "ragen2/Code-v0", "kwargs": {"difficulty": 1}},
                          "lake": {"id": "ragen2/FrozenLake-v0"}})
    check_split(cfg, 8)  # 4 code tasks of the 4 held out, 4 lake episodes
    with pytest.raises(SplitError, match="asks env 'code' .* for 5 distinct .* has 4 of its 14"):
        check_split(cfg, 10)


class OneProblem(gym.Env):
    """A user env with a single problem: one part of its split is empty and it cannot say so."""

    observation_space = gym.spaces.Text(64)
    action_space = gym.spaces.Text(64)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return "only", {}

    def step(self, action):
        return "done", 0.0, True, False, {}

    def problem_key(self) -> str:
        return "only"


def test_an_unreachable_part_of_a_non_enumerated_env_fails_at_start_up():
    if "ragen2_test/OneProblem-v0" not in gym.registry:
        gym.register(id="ragen2_test/OneProblem-v0", entry_point=OneProblem)
    with pytest.raises(SplitError, match=r"env 'oneproblem' \(ragen2_test/OneProblem-v0\): none "
                                         r"of 1000 seeds .* in the (held-out|training) part"):
        check_split(_env_cfg("ragen2_test/OneProblem-v0", {}), 4)


@pytest.mark.parametrize("value", [0, 0.0, 1, 1.0, -0.1, 1.5, float("nan"), True, "0.2"])
def test_heldout_fraction_must_lie_strictly_between_0_and_1(value):
    with pytest.raises(ConfigError, match=r"env.heldout_fraction=.*a number in \(0, 1\)"):
        EnvConfig(heldout_fraction=value).validate("env")


def test_heldout_fraction_is_checked_when_the_config_is_composed():
    from ragen2.train import load_config

    with pytest.raises(ConfigError, match=r"env.heldout_fraction=1.0: a number in \(0, 1\)"):
        load_config(["env.heldout_fraction=1.0"])
    assert load_config([]).env.heldout_fraction == 0.2
