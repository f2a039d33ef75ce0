"""``+experiment=smollm2_countdown`` (issue 46, item 2): composed without training, it is the
measured candidate ``countdown2_retry`` (benchmarks/smollm2_multiturn_tasks.py) with at least 3
turns, a held-out split disjoint from training by construction (both parts enumerated here, no
model), and a memory estimate that fits a quiet 24 GiB machine."""

from __future__ import annotations

import pytest

from ragen2 import seeding
from ragen2.rollout.envs import all_entries, eval_entries, make_env, train_entries
from ragen2.rollout.split import HELDOUT, TRAIN, ProblemSplit, part_of
from ragen2.train import load_config
from tests.cluster.test_host_memory import GiB, planned_on_a_quiet_24gb_machine
from tests.scripts import load_benchmark

PRESET = "+experiment=smollm2_countdown"


@pytest.fixture(scope="module")
def cfg():
    return load_config([PRESET, "model.dtype=bfloat16"])


@pytest.fixture(scope="module")
def candidate():
    return load_benchmark("smollm2_multiturn_tasks.py", "smollm2_multiturn_tasks").CANDIDATES[
        "countdown2_retry"]


def space(num_count: int, max_number: int) -> set[str]:
    """Every problem key two-number Countdown can draw, by hand: its generator
    (``CountdownTextEnv._generate``) combines the two numbers with + - * (a - b taken the larger
    first), and redraws a zero."""
    assert num_count == 2
    keys = set()
    for a in range(1, max_number + 1):
        for b in range(a, max_number + 1):
            for value in (a + b, b - a, a * b):
                if value > 0:
                    keys.add(f"countdown:{a},{b}->{value}")
    return keys


def test_the_preset_is_the_measured_candidate(cfg, candidate):
    (entry,) = train_entries(cfg.env)
    assert eval_entries(cfg.env) == [entry]  # evaluated on the env it trains on
    assert (entry.id, entry.kwargs) == (candidate.env_id, candidate.kwargs)
    assert cfg.rollout.max_turns == candidate.max_turns >= 3  # the bar: several turns
    assert cfg.env.kwargs["max_attempts"] == cfg.rollout.max_turns  # the env ends it there
    assert cfg.rollout.response_format == "plain" and cfg.env.kwargs["read"] == "last"
    # the measurement's protocol (smollm2_multiturn_tasks.py's defaults): T = 0.5 held out,
    # at most 128 new tokens a turn, 1,024-token episodes
    assert cfg.engine.eval_temperature == 0.5 and cfg.engine.max_new_tokens == 128
    assert cfg.rollout.max_context_tokens == cfg.engine.max_model_len == 1024
    assert cfg.cluster.learner_world_size == 1 and cfg.engine.name == "vllm"
    assert cfg.algorithm.name == "grpo" and not cfg.trainer.warm_start.enabled
    assert cfg.monitor.panel_prefix_turns == 0  # Countdown has no scripted opening to replay
    # a larger held-out share than the candidate's, the task unchanged (see the next test)
    assert cfg.env.heldout_fraction > candidate.heldout_fraction


def test_the_held_out_split_is_disjoint_from_training(cfg, candidate):
    kw, frac = cfg.env.kwargs, cfg.env.heldout_fraction
    keys = space(kw["num_count"], kw["max_number"])
    env = make_env(cfg.env.id, kw).unwrapped
    reached = set()
    for s in range(5000):  # the rarest key is drawn with probability ~1/300
        env.reset(seed=s)
        reached.add(env.problem_key())
    assert reached == keys and len(keys) == 154
    held = {k for k in keys if part_of(k, frac) == HELDOUT}
    train = keys - held
    assert (len(train), len(held)) == (114, 40)  # the preset's comments
    measured = {k for k in keys if part_of(k, candidate.heldout_fraction) == HELDOUT}
    assert len(measured) == 21 and measured <= held  # the candidate's held-out part, kept

    # what a run draws: training groups from the training part, evaluation from the held-out
    split = ProblemSplit(all_entries(cfg.env), frac)
    try:
        name = train_entries(cfg.env)[0].name

        def key(seed: int) -> str:
            env.reset(seed=seed)
            return env.problem_key()

        trained = {key(split.resolve(name, seeding.group_seed(cfg.seed, step, g), TRAIN))
                   for step in range(1, cfg.trainer.total_steps + 1)
                   for g in range(cfg.rollout.env_groups)}
        specs = split.eval_specs(eval_entries(cfg.env), cfg.trainer.eval_episodes)
        evaluated = [key(s.env_seed) for s in specs]
    finally:
        split.close()
    assert trained <= train and set(evaluated) <= held and not trained & set(evaluated)
    assert len(evaluated) == cfg.trainer.eval_episodes == 128
    assert len(set(evaluated)) == 38  # of the 40 held out, with repeats (the preset's comments)


def test_the_memory_estimate_fits_a_quiet_24gb_machine(cfg):
    planned, b = planned_on_a_quiet_24gb_machine(cfg)
    assert b.fits, b.describe()
    assert b.need < 24 * GiB
    assert not planned.learner.activation_checkpointing  # no recomputation needed there
