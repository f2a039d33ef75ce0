"""benchmarks/smollm2_multiturn_tasks.py: the held-out episodes it plays and the numbers it reports,
on a stub engine whose replies are hand-written (no model is loaded or sampled)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from ragen2.engines.base import Generation
from ragen2.rollout.envs import make_env
from ragen2.rollout.split import HELDOUT, part_of
from tests.scripts import load_benchmark


@pytest.fixture(scope="module")
def mt():
    return load_benchmark("smollm2_multiturn_tasks.py", "smollm2_multiturn_tasks")


class StubEngine:
    """Replies ``reply`` to every prompt (tokenised by the tests' tiny tokenizer)."""

    policy_version = 0

    def __init__(self, tokenizer, reply):
        self.tokenizer, self.reply = tokenizer, reply

    def generate(self, prompts, params):
        ids = list(self.tokenizer.encode(self.reply, add_special_tokens=False))
        return [Generation(ids, [0.0] * len(ids), "stop", 0, self.reply) for _ in prompts]


def _args(**kw):
    base = dict(n=8, samples=1, temperature=0.5, max_new_tokens=32, max_context_tokens=1024,
                seed=0, keep_samples=2)
    return SimpleNamespace(**{**base, **kw})


def test_every_candidate_plays_held_out_problems_only(mt):
    for name, cand in mt.CANDIDATES.items():
        assert cand.max_turns >= 3, name  # the bar: several turns
        seeds, info = mt.heldout_seeds(name, cand, 16)
        assert len(seeds) == 16 and min(seeds) >= 2**31 and info["distinct_problems"] <= 16
        env = make_env(cand.env_id, cand.kwargs).unwrapped
        for s in seeds:
            env.reset(seed=s)
            assert part_of(env.problem_key(), cand.heldout_fraction) == HELDOUT
    # one-digit Math holds out 55 of 162 problems (as +experiment=smollm2_math): 128 episodes
    # sample them with repeats; two-digit has thousands, so 128 distinct ones
    one = mt.heldout_seeds("math1_retry", mt.CANDIDATES["math1_retry"], 128)[1]
    two = mt.heldout_seeds("math2_retry", mt.CANDIDATES["math2_retry"], 128)[1]
    assert one["split_sizes"] == {"train": 107, "heldout": 55} and one["distinct_problems"] <= 55
    assert two["distinct_problems"] == 128


def test_random_moves_baseline_is_a_share_within_the_turn_limit(mt):
    cand = mt.CANDIDATES["frozenlake3_last"]
    seeds, _ = mt.heldout_seeds("frozenlake3_last", cand, 16)
    r = mt.random_moves(cand, seeds, episodes=200)
    assert 0.0 < r["success"] < 1.0 and 1.0 <= r["mean_turns"] <= cand.max_turns
    assert 1.0 <= r["mean_shortest_path"] <= 4.0  # 3x3: at most 4 moves apart
    assert r == mt.random_moves(cand, seeds, episodes=200)  # seeded


def test_a_wrong_answer_every_turn_uses_every_attempt(mt, tiny_tokenizer):
    # "The answer is 1000." is read (the last number) and never right: 3 turns, all valid
    r = mt.measure(StubEngine(tiny_tokenizer, "The answer is 1000."), "math2_direction",
                   mt.CANDIDATES["math2_direction"], _args())
    assert r["episodes"] == 8 and r["success"] == 0.0 and r["success_ci95"][0] == 0.0
    assert r["turns"] == {"3": 8} and r["mean_turns"] == 3 and r["success_by_turns"] == {}
    assert r["ended"] == {"ended": 1.0}  # attempts spent: the env ended it
    assert r["format_rate"] == 1.0 and r["invalid_action_rate"] == 0.0
    assert r["truncated_reply_rate"] == 0.0
    ex = r["examples"][0]
    assert len(r["examples"]) == 2 and len(ex["turns"]) == 3
    assert "1000 is too high" in ex["turns"][1]["observation"]
    assert ex["final_observation"].startswith("Incorrect. No attempts left.")


def test_a_reply_without_an_action_is_an_invalid_action_each_turn(mt, tiny_tokenizer):
    r = mt.measure(StubEngine(tiny_tokenizer, "I am not sure."), "frozenlake3_last",
                   mt.CANDIDATES["frozenlake3_last"], _args(n=4))
    assert r["success"] == 0.0 and r["turns"] == {"6": 4}  # the map never changes: 6 turns
    assert r["invalid_action_rate"] == 1.0 and r["episodes_with_an_invalid_action"] == 1.0
    assert r["ended"] == {"max_turns": 1.0}
    assert "random_moves" in r and r["distinct_problems"] <= 4


def test_samples_per_problem_report_the_groups_with_a_spread(mt, tiny_tokenizer):
    r = mt.measure(StubEngine(tiny_tokenizer, "Down"), "frozenlake3_last",
                   mt.CANDIDATES["frozenlake3_last"], _args(n=4, samples=2))
    assert r["episodes"] == 8 and r["samples_per_problem"] == 2
    assert r["groups_with_spread"] == 0.0  # the same reply on the same map: the same outcome
    assert len(r["examples"]) == 2
