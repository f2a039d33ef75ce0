"""Env entries, mixtures and the contract probe (``ragen2.rollout.envs``)."""

from __future__ import annotations

import gymnasium as gym
import pytest

from ragen2.config import ConfigError
from ragen2.rollout.envs import (EnvEntry, EnvSpecError, all_entries, allocate, assign, env_name,
                                 eval_entries, probe_env, train_entries)
from ragen2.train import load_config


@pytest.mark.parametrize("total,shares,expected", [
    (8, [0.5, 0.25, 0.25], [4, 2, 2]),
    (8, [1, 1, 1], [3, 3, 2]),          # 8/3 = 2.67 each: remainders tie, earlier entries first
    (10, [0.7, 0.2, 0.1], [7, 2, 1]),
    (5, [2, 1], [3, 2]),                # 3.33 / 1.67: the larger remainder (.67) gets the extra one
    (128, [1], [128]),
    (3, [1, 1, 1, 1], [1, 1, 1, 0]),
])
def test_allocate_largest_remainder(total, shares, expected):
    assert allocate(total, shares) == expected
    assert sum(allocate(total, shares)) == total


@pytest.mark.parametrize("shares", [[], [1, 0], [1, -1]])
def test_allocate_rejects_bad_shares(shares):
    with pytest.raises(ValueError, match="positive"):
        allocate(4, shares)


def test_assign_contiguous_blocks():
    entries = [EnvEntry("a", "x", {}, 2), EnvEntry("b", "y", {}, 1), EnvEntry("c", "z", {}, 1)]
    assert assign(8, entries) == ["a"] * 4 + ["b"] * 2 + ["c"] * 2


@pytest.mark.parametrize("env_id,name", [("ragen2/FrozenLake-v0", "frozenlake"),
                                         ("corridor_env:Corridor-v0", "corridor"),
                                         ("CartPole-v1", "cartpole")])
def test_env_name(env_id, name):
    assert env_name(env_id) == name


def test_single_env_and_mixture_entries():
    cfg = load_config([])
    assert train_entries(cfg.env) == [EnvEntry("frozenlake", "ragen2/FrozenLake-v0", {}, 1.0)]
    assert eval_entries(cfg.env) == train_entries(cfg.env)
    mixed = load_config(["env=mixed", "env.eval.fl6.id=ragen2/FrozenLake-v0",
                         "env.eval.fl6.kwargs.size=6"])
    assert [(e.name, e.share, e.format_penalty) for e in train_entries(mixed.env)] == [
        ("sokoban", 0.5, -1.0), ("frozenlake", 0.25, None), ("math", 0.25, None)]
    from ragen2.rollout.envs import format_penalties

    assert format_penalties(train_entries(mixed.env), -0.1) == {"sokoban": -1.0, "frozenlake": -0.1,
                                                                "math": -0.1}
    assert eval_entries(mixed.env) == [EnvEntry("fl6", "ragen2/FrozenLake-v0", {"size": 6}, 1.0)]
    assert [e.name for e in all_entries(mixed.env)] == ["sokoban", "frozenlake", "math", "fl6"]


def test_one_name_two_envs_is_refused():
    cfg = load_config(["env=mixed", "env.eval.math.id=ragen2/Math-v0",
                       "env.eval.math.kwargs.difficulty=3"])
    with pytest.raises(EnvSpecError, match="'math' is used for two different envs"):
        all_entries(cfg.env)


@pytest.mark.parametrize("overrides,key", [
    (["env=mixed", "env.mix.math.share=0.01"], "env.mix.math.share"),  # rounds to 0 groups
    (["env=mixed", "env.mix.math.share=-1"], "env.mix.math.share"),
    (["env=mixed", "env.mix.x.id=a", "env.mix.x.sharre=1"], "env.mix.x.sharre"),
    (["env=mixed", "env.mix.y.share=1"], "env.mix.y.id"),
    (["env=mixed", "env.mix.math.format_penalty=0.5"], "env.mix.math.format_penalty"),
    (["env.mix.a.id=ragen2/Math-v0"], "env.id"),  # a mixture and a single id at once
])
def test_bad_mixture_config_names_the_key(overrides, key):
    with pytest.raises(ConfigError) as e:
        load_config(overrides)
    assert e.value.key == key


def test_entry_names_must_be_metric_names():
    from ragen2.config import EnvConfig

    cfg = EnvConfig(eval={"bad name": {"id": "ragen2/Math-v0"}})
    with pytest.raises(ConfigError, match="letters, digits"):
        cfg.validate("env")


class _NumberObsEnv(gym.Env):
    observation_space = gym.spaces.Text(64)
    action_space = gym.spaces.Text(64)

    def reset(self, seed=None, options=None):
        return 7, {}

    def step(self, action):  # pragma: no cover - never reached
        raise AssertionError


class _NoSpacesEnv(gym.Env):
    def reset(self, seed=None, options=None):  # pragma: no cover - never reached
        return "x", {}


class _RaisingEnv(_NumberObsEnv):
    def reset(self, seed=None, options=None):
        raise KeyError("no such level")


@pytest.fixture
def registered():
    ids = {"test/NumberObs-v0": _NumberObsEnv, "test/Raising-v0": _RaisingEnv,
           "test/NoSpaces-v0": _NoSpacesEnv}
    for k, cls in ids.items():
        gym.register(id=k, entry_point=cls)
    yield
    for k in ids:
        gym.registry.pop(k, None)


def test_probe_env_reports_contract_breaks(registered):
    with pytest.raises(EnvSpecError, match="must return .observation: str, info: dict., got a int"):
        probe_env(EnvEntry("n", "test/NumberObs-v0"))
    with pytest.raises(EnvSpecError, match="raised in reset.*KeyError"):
        probe_env(EnvEntry("r", "test/Raising-v0"))
    with pytest.raises(EnvSpecError, match="not a complete gymnasium.Env.*action space"):
        probe_env(EnvEntry("s", "test/NoSpaces-v0"))
    assert probe_env(EnvEntry("fl", "ragen2/FrozenLake-v0")) is True
    with pytest.raises(EnvSpecError, match="could not be made"):
        probe_env(EnvEntry("x", "no_such_module_xyz:Nope-v0"))
