"""Token-budget micro-batches: hand-worked partitions, and the invariants FSDP needs."""

from __future__ import annotations

import random

import pytest

from ragen2.learner.microbatch import (mini_batches, pack_by_tokens, plan_token_micro_batches,
                                       split_to_count)

LENGTHS = [5, 9, 3, 9, 2]  # longest first (ties by index): rows 1, 3, 0, 2, 4


def test_pack_by_tokens_by_hand():
    # budget 18: [1, 3] costs 2 x 9 = 18; row 0 would make 3 x 9 = 27, so [0, 2, 4] = 3 x 5 = 15
    assert pack_by_tokens(LENGTHS, 18) == [[1, 3], [0, 2, 4]]
    # budget 8: rows of 9 exceed it alone (own micro-batch each); 5 + 3 -> 2 x 5 = 10 > 8;
    # [2, 4] = 2 x 3 = 6
    assert pack_by_tokens(LENGTHS, 8) == [[1], [3], [0], [2, 4]]
    assert pack_by_tokens(LENGTHS, 1000) == [[1, 3, 0, 2, 4]]
    assert pack_by_tokens(LENGTHS, 18, rows=[4, 0]) == [[0, 4]]
    assert pack_by_tokens([], 10) == []
    with pytest.raises(ValueError, match="budget"):
        pack_by_tokens(LENGTHS, 0)


def test_split_to_count_halves_the_costliest():
    groups = [[1, 3], [0, 2, 4]]  # costs 18 and 15
    assert split_to_count(groups, LENGTHS, 2) == groups
    assert split_to_count(groups, LENGTHS, 3) == [[1], [3], [0, 2, 4]]
    # then the only multi-row one, [0, 2, 4], splits longer-first: [0, 2] and [4]
    assert split_to_count(groups, LENGTHS, 4) == [[1], [3], [0, 2], [4]]
    # runs out of rows at 5 single-row micro-batches
    assert split_to_count(groups, LENGTHS, 9) == [[1], [3], [0], [2], [4]]
    assert groups == [[1, 3], [0, 2, 4]]  # not modified in place


def test_plan_by_hand():
    # sorted rows [1, 3, 0, 2, 4] dealt round-robin: rank 0 gets [1, 0, 4], rank 1 gets [3, 2].
    # rank 0 packs [[1, 0], [4]] (2 x 9 = 18, then 3 x 9 > 18); rank 1 packs [[3, 2]] and
    # splits it to match rank 0's count
    assert plan_token_micro_batches(LENGTHS, 2, 18) == [[[1, 0], [4]], [[3], [2]]]
    assert plan_token_micro_batches(LENGTHS, 3, 18) == [[[1, 2]], [[3, 4]], [[0]]]
    # rank 0 gets [1, 4] and needs 2 micro-batches at budget 9; single-row ranks get an empty one
    assert plan_token_micro_batches(LENGTHS, 4, 9) == [[[1], [4]], [[3], []], [[0], []], [[2], []]]
    assert plan_token_micro_batches([7], 2, 4) == [[[0]], [[]]]  # fewer rows than ranks


@pytest.mark.parametrize("world", [1, 2, 3])
def test_plan_invariants(world):
    rng = random.Random(world)
    for _ in range(200):
        lengths = [rng.randint(1, 50) for _ in range(rng.randint(1, 20))]
        budget = rng.randint(1, 120)
        plan = plan_token_micro_batches(lengths, world, budget)
        assert plan == plan_token_micro_batches(lengths, world, budget)  # deterministic
        assert len(plan) == world and len({len(p) for p in plan}) == 1  # same count on every rank
        rows = sorted(i for p in plan for g in p for i in g)
        assert rows == list(range(len(lengths)))  # every row exactly once
        for p in plan:
            for g in p:
                cost = len(g) * max((lengths[i] for i in g), default=0)
                assert cost <= budget or len(g) == 1


def test_mini_batches_random_membership_groups_together_inside():
    import numpy as np

    perm = [5, 0, 3, 6, 1, 4, 2]
    groups = [0, 0, 1, 1, 2, 2, 2]  # group of each row id
    got = mini_batches(perm, groups, 2)
    # membership is np.array_split(perm, 2): [5, 0, 3, 6] and [1, 4, 2] -- never whole groups
    assert [sorted(m) for m in got] == [sorted(m.tolist()) for m in np.array_split(perm, 2)]
    # inside: by group -- [5, 0, 3, 6] has groups 2, 0, 1, 2 -> rows 0, 3, then 5, 6 (perm order);
    # [1, 4, 2] has groups 0, 2, 1 -> rows 1, 2, 4
    assert got == [[0, 3, 5, 6], [1, 2, 4]]
    assert mini_batches(perm, groups, 10)[0] == [5] and len(mini_batches(perm, groups, 10)) == 7
