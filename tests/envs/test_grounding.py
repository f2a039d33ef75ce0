"""The grid envs' ``ground(reasoning)`` hook on hand-written reasoning: right, wrong, partly right
and unparsable statements of the state."""

from __future__ import annotations

import pytest

from ragen2_envs import FrozenLakeTextEnv, SokobanTextEnv
from ragen2_envs.grid import BOX_SUBJECT, PLAYER_SUBJECT, share_right, stated_cells

#: player at row 3, column 3; boxes at row 3, column 4 and row 5, column 3; targets elsewhere
LEVEL = ["#######",
         "#_____#",
         "#_PB__#",
         "#__T__#",
         "#_B_T_#",
         "#_____#",
         "#######"]


@pytest.fixture
def lake():
    env = FrozenLakeTextEnv(size=4, hole_prob=0.0, random_start_goal=False)
    env.reset(seed=0)  # start top-left, goal bottom-right, no holes
    return env


@pytest.fixture
def room():
    env = SokobanTextEnv(size=7)
    env.reset(seed=0, options={"level": LEVEL})
    return env


def test_stated_cells_reads_the_envs_phrasing_and_small_variants():
    assert stated_cells("I am at row 2, column 3. The goal is at row 4, column 4.",
                        PLAYER_SUBJECT) == [(1, 2)]
    assert stated_cells("i'm now at Row 1 col 5; you are at row 3 and column 1",
                        PLAYER_SUBJECT) == [(0, 4), (2, 0)]
    assert stated_cells("The goal is at row 4, column 4. Row 2, column 2 is ice.", PLAYER_SUBJECT) == []
    assert stated_cells("Boxes at row 3, column 4 and row 5, column 3. Boxes on targets: 0 of 2.",
                        BOX_SUBJECT, many=True) == [(2, 3), (4, 2)]
    # only the cells right after the box statement: the target's cell is no box claim
    assert stated_cells("The box is at row 3, column 4, and the target at row 4, column 4.",
                        BOX_SUBJECT, many=True) == [(2, 3)]
    assert stated_cells("boxes are at row 1, column 2, row 3, column 4; row 5, column 6",
                        BOX_SUBJECT, many=True) == [(0, 1), (2, 3), (4, 5)]
    with pytest.raises(TypeError, match="str"):
        stated_cells(None, PLAYER_SUBJECT)


def test_share_right():
    assert share_right([]) is None
    assert share_right([True, False, True]) == pytest.approx(2 / 3)


def test_frozenlake_grounds_the_stated_position(lake):
    assert lake.ground("I am at row 1, column 1. The goal is at row 4, column 4.") == 1.0
    assert lake.ground("I am at row 1, column 2. The goal is at row 4, column 4.") == 0.0
    assert lake.ground("You are at row 1, column 1.") == 1.0  # the observation's words
    assert lake.ground("I am at row 9, column 9.") == 0.0  # off the board: a wrong claim
    # partly right: two statements of the position, one of them true
    assert lake.ground("I am at row 1, column 1. Now I am at row 2, column 1.") == 0.5
    # nothing checkable: None (not 0)
    assert lake.ground("The goal is at row 4, column 4. The shortest safe path starts Down.") is None
    assert lake.ground("I am at row two, column one.") is None
    assert lake.ground("") is None
    # checked against the current state: after a move the old statement is wrong
    lake.step("Right")
    assert lake.ground("I am at row 1, column 1.") == 0.0
    assert lake.ground("I am at row 1, column 2.") == 1.0


def test_sokoban_grounds_player_and_boxes_with_partial_credit(room):
    right = "I am at row 3, column 3. Boxes at row 3, column 4 and row 5, column 3."
    assert room.ground(right) == 1.0
    # player right, one of two boxes wrong: 2 of 3 claims
    assert room.ground("I am at row 3, column 3. Boxes at row 3, column 4 and row 5, column 4."
                       ) == pytest.approx(2 / 3)
    # player wrong, the one stated box right: 1 of 2
    assert room.ground("I am at row 2, column 2. The box is at row 5, column 3.") == 0.5
    # the demonstration's own phrasing: the player is checked, the count is not a claim
    assert room.ground("I am at row 3, column 3. Boxes on targets: 0 of 2. The plan starts Up."
                       ) == 1.0
    assert room.ground("I am at row 4, column 3. Boxes on targets: 0 of 2.") == 0.0
    assert room.ground("Boxes on targets: 0 of 2. The plan starts Up.") is None
    assert room.ground("no idea where anything is") is None
    room.step("Right")  # pushes the box at row 3, column 4 to column 5
    assert room.ground("I am at row 3, column 4. Boxes at row 3, column 5 and row 5, column 3."
                       ) == 1.0
    assert room.ground(right) == pytest.approx(1 / 3)  # only the untouched box is still right


def test_ground_before_reset_is_refused():
    with pytest.raises(RuntimeError, match="before reset"):
        FrozenLakeTextEnv().ground("I am at row 1, column 1.")
    with pytest.raises(RuntimeError, match="before reset"):
        SokobanTextEnv().ground("I am at row 1, column 1.")


@pytest.mark.parametrize("make", [lambda: FrozenLakeTextEnv(size=4, hole_prob=0.2),
                                  lambda: SokobanTextEnv(size=6, num_boxes=2)])
def test_the_experts_reasoning_is_always_grounded(make):
    """The demonstrations (what a warm-started model imitates) state the true state every turn."""
    env = make()
    for seed in range(5):
        env.reset(seed=seed)
        for _ in range(12):
            think, action = env.demonstration()
            assert env.ground(think) == 1.0, (seed, think)
            _, _, terminated, truncated, _ = env.step(action)
            if terminated or truncated:
                break
