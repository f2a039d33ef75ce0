"""Tests for ragen2/FrozenLake-v0 and the shared grid helpers."""

import importlib
import re
import warnings

import gymnasium
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import ragen2_envs
from ragen2_envs import FrozenLakeTextEnv
from ragen2_envs.grid import (
    ACTION_NAMES,
    DIRECTIONS,
    PERPENDICULAR,
    bfs_path,
    move,
    parse_action,
    read_action,
)

STATUS_RE = re.compile(r"^You are at row (\d+), column (\d+)\. The goal is at row (\d+), column (\d+)\.$")


def not_hole(cell):
    return not bool(cell)


def solve(env):
    u = env.unwrapped
    return bfs_path(u.holes, u.player_pos, u.goal_pos, not_hole)


def parse_obs(obs, size):
    lines = obs.split("\n")
    assert len(lines) == size + 1, obs
    board = [line.split(" ") for line in lines[:size]]
    m = STATUS_RE.match(lines[-1])
    assert m, lines[-1]
    pr, pc, gr, gc = (int(x) for x in m.groups())
    return board, (pr, pc), (gr, gc)


# ---------------------------------------------------------------- grid helpers


def test_bfs_path_tie_break_and_edge_cases():
    open_grid = ["___", "___", "___"]
    ice = lambda ch: ch == "_"  # noqa: E731
    # Lexicographically smallest shortest path under Left < Down < Right < Up.
    assert bfs_path(open_grid, (0, 0), (2, 2), ice) == ["Down", "Down", "Right", "Right"]
    assert bfs_path(open_grid, (2, 2), (0, 0), ice) == ["Left", "Left", "Up", "Up"]
    assert bfs_path(open_grid, (1, 1), (1, 1), ice) == []
    walled = ["_#_", "_#_", "_#_"]
    assert bfs_path(walled, (0, 0), (0, 2), ice) is None
    detour = ["_#G", "___"]
    assert bfs_path(detour, (0, 0), (0, 2), ice) == ["Down", "Right", "Right", "Up"]
    assert list(DIRECTIONS) == list(ACTION_NAMES) == ["Left", "Down", "Right", "Up"]
    assert move((0, 0), "Up", 3, 3) == (0, 0) and move((0, 0), "Down", 3, 3) == (1, 0)


@pytest.mark.parametrize(
    "text,expected",
    [("Left", "Left"), (" down. ", "Down"), ("UP", "Up"), ("right.", "Right"), ("\nLeft\t", "Left")],
)
def test_parse_action_valid(text, expected):
    assert parse_action(text) == expected


@pytest.mark.parametrize("text", ["xyz", "", "Left Down", "Left..", "go left", None, 3, "L"])
def test_parse_action_invalid(text):
    assert parse_action(text) is None


@pytest.mark.parametrize(
    "text,first,last",
    [
        ("Down", "Down", "Down"),
        ("The goal is below me, so I move down.", "Down", "Down"),
        ("Move Right, then Down.", "Right", "Down"),
        ("I can't go left (the edge), so UP", "Left", "Up"),
        ("right\nleft", "Right", "Left"),
        ("upward and downstream, alright", None, None),  # no move word, only words that hold one
        ("", None, None),
        (None, None, None),
    ],
)
def test_read_action_first_and_last_move_word(text, first, last):
    assert read_action(text, "first") == first and read_action(text, "last") == last
    assert read_action(text, "word") == parse_action(text)


def test_read_action_refuses_an_unknown_reading():
    with pytest.raises(ValueError, match="read"):
        read_action("Left", "middle")


def test_free_text_replies_with_read_first_and_last():
    first = FrozenLakeTextEnv(size=4, hole_prob=0.0, random_start_goal=False, read="first")
    last = FrozenLakeTextEnv(size=4, hole_prob=0.0, random_start_goal=False, read="last")
    word = FrozenLakeTextEnv(size=4, hole_prob=0.0, random_start_goal=False)
    reply = "Moving right first, then down."
    for env in (first, last, word):
        env.reset(seed=0)
    assert first.step(reply)[4]["action_is_valid"] and first.player_pos == (0, 1)
    assert last.step(reply)[4]["action_is_valid"] and last.player_pos == (1, 0)
    assert not word.step(reply)[4]["action_is_valid"] and word.player_pos == (0, 0)
    obs, _, _, _, info = first.step("I am not sure.")  # no move word: invalid, as before
    assert not info["action_is_valid"] and first.player_pos == (0, 1)
    assert obs.startswith("Invalid action 'I am not sure.'. Valid actions: Left, Down, Right, Up.")
    # the problem (the map) does not depend on how replies are read
    assert first.problem_key() == word.problem_key()
    assert "Reply with one move: Left, Down, Right or Up." in first.instructions
    assert "Reply with one move" not in word.instructions


# ---------------------------------------------------------------- maps


def test_determinism_per_seed():
    a, b = FrozenLakeTextEnv(size=5), FrozenLakeTextEnv(size=5)
    for seed in range(10):
        obs_a, info_a = a.reset(seed=seed)
        obs_b, _ = b.reset(seed=seed)
        assert obs_a == obs_b
        assert np.array_equal(a.holes, b.holes)
        obs_a2, _ = a.reset(seed=seed)
        assert obs_a2 == obs_a
        assert info_a["instructions"] == a.instructions


def test_different_seeds_give_different_maps():
    env = FrozenLakeTextEnv(size=4)
    maps = {env.reset(seed=seed)[0] for seed in range(20)}
    assert len(maps) >= 15
    fixed = FrozenLakeTextEnv(size=4, random_start_goal=False)
    assert len({fixed.reset(seed=seed)[0] for seed in range(20)}) >= 10


@pytest.mark.parametrize("size", [4, 6])
@pytest.mark.parametrize("random_start_goal", [True, False])
def test_maps_solvable(size, random_start_goal):
    env = FrozenLakeTextEnv(size=size, random_start_goal=random_start_goal)
    for seed in range(200):
        obs, _ = env.reset(seed=seed)
        start, goal, holes = env.start_pos, env.goal_pos, env.holes
        assert start != goal
        assert not holes[start] and not holes[goal]
        assert bfs_path(holes, start, goal, not_hole)
        if not random_start_goal:
            assert start == (0, 0) and goal == (size - 1, size - 1)
        board, (pr, pc), (gr, gc) = parse_obs(obs, size)
        assert (pr - 1, pc - 1) == start and (gr - 1, gc - 1) == goal
        assert board[pr - 1][pc - 1] == "P" and board[gr - 1][gc - 1] == "G"


def test_dense_holes_still_solvable():
    # Corner to corner through 85% holes: random draws essentially never connect, so this
    # exercises the path-carving fallback (and its determinism).
    env = FrozenLakeTextEnv(size=12, hole_prob=0.85, random_start_goal=False)
    for seed in range(3):
        obs, _ = env.reset(seed=seed)
        assert bfs_path(env.holes, env.start_pos, env.goal_pos, not_hole)
        assert env.reset(seed=seed)[0] == obs


def test_observation_format():
    env = FrozenLakeTextEnv(size=4)
    obs, _ = env.reset(seed=3)
    lines = obs.split("\n")
    assert len(lines) == 5
    for line in lines[:4]:
        assert re.fullmatch(r"[_OGP]( [_OGP]){3}", line), line
    assert obs.count("P") == 1 and obs.count("G") == 1
    pr, pc = env.player_pos
    gr, gc = env.goal_pos
    assert lines[4] == f"You are at row {pr + 1}, column {pc + 1}. The goal is at row {gr + 1}, column {gc + 1}."
    assert obs in env.observation_space


# ---------------------------------------------------------------- dynamics


def test_bfs_path_reaches_goal_in_env():
    env = FrozenLakeTextEnv(size=6)
    for seed in range(30):
        env.reset(seed=seed)
        path = solve(env)
        for i, action in enumerate(path):
            obs, reward, terminated, truncated, info = env.step(action)
            assert info["action_is_valid"] and not truncated
            if i < len(path) - 1:
                assert reward == 0.0 and not terminated and not info["success"]
        assert reward == 1.0 and terminated and info["success"]
        assert env.player_pos == env.goal_pos
        assert obs.endswith("You reached the goal.")
        assert "G" not in obs  # P is drawn on the goal cell
        gr, gc = env.goal_pos
        assert obs.split("\n")[gr].split(" ")[gc] == "P"


def test_demonstration_matches_bfs_and_observation():
    env = gymnasium.make("ragen2/FrozenLake-v0", size=5)
    for seed in range(30):
        obs, _ = env.reset(seed=seed)
        done = False
        while not done:
            reasoning, action = env.unwrapped.demonstration()
            assert action == solve(env)[0]
            _, (pr, pc), (gr, gc) = parse_obs(obs, 5)
            assert reasoning == (
                f"I am at row {pr}, column {pc}. The goal is at row {gr}, column {gc}. "
                f"The shortest safe path starts {action}."
            )
            obs, reward, terminated, truncated, info = env.step(action)
            done = terminated or truncated
        assert info["success"] and reward == 1.0
        with pytest.raises(RuntimeError):
            env.unwrapped.demonstration()


def test_hole_terminates_with_zero_reward():
    env = FrozenLakeTextEnv(size=5, hole_prob=0.5)
    for seed in range(100):
        env.reset(seed=seed)
        pos, holes = env.player_pos, env.holes
        for action in ACTION_NAMES:
            nxt = move(pos, action, 5, 5)
            if nxt != pos and holes[nxt]:
                obs, reward, terminated, truncated, info = env.step(action)
                assert terminated and not truncated
                assert reward == 0.0
                assert info["success"] is False and info["action_is_valid"] is True
                assert env.player_pos == nxt
                assert obs.split("\n")[nxt[0]].split(" ")[nxt[1]] == "X"
                assert obs.endswith(f"You are at row {nxt[0] + 1}, column {nxt[1] + 1}. You fell into a hole.")
                # Stepping after the end is a no-op.
                obs2, reward2, terminated2, _, _ = env.step("Up")
                assert obs2 == obs and reward2 == 0.0 and terminated2
                return
    pytest.fail("no seed with a hole next to the start")


def test_invalid_action():
    env = FrozenLakeTextEnv(size=4)
    obs0, _ = env.reset(seed=1)
    pos0 = env.player_pos
    for bad in ["xyz", "", "move left", "Left Down", 3, "héllo\nworld" * 10]:
        obs, reward, terminated, truncated, info = env.step(bad)
        assert info["action_is_valid"] is False and info["success"] is False
        assert reward == 0.0 and not terminated and not truncated
        assert env.player_pos == pos0
        note, rest = obs.split("\n", 1)
        assert rest == obs0
        assert note.startswith("Invalid action '") and note.endswith(
            "'. Valid actions: Left, Down, Right, Up."
        )
        assert obs in env.observation_space
    obs, _, _, _, _ = env.step("xyz")
    assert obs == "Invalid action 'xyz'. Valid actions: Left, Down, Right, Up.\n" + obs0
    # Echo is sanitised to the observation charset and cut at 30 characters.
    assert env.step("h\u00e9llo\nyou")[0].split("\n")[0] == "Invalid action 'h?llo?you'. Valid actions: Left, Down, Right, Up."
    assert env.step("a" * 100)[0].split("\n")[0] == (
        "Invalid action '" + "a" * 30 + "...'. Valid actions: Left, Down, Right, Up."
    )


def test_valid_action_spellings():
    env = FrozenLakeTextEnv(size=4, hole_prob=0.0, random_start_goal=False)
    env.reset(seed=0)
    _, _, _, _, info = env.step("  right. ")
    assert info["action_is_valid"] and env.player_pos == (0, 1)
    _, _, _, _, info = env.step("LEFT")
    assert info["action_is_valid"] and env.player_pos == (0, 0)


def test_wall_bump():
    env = FrozenLakeTextEnv(size=4, random_start_goal=False)
    obs0, _ = env.reset(seed=0)
    assert env.player_pos == (0, 0)
    for action in ["Up", "Left"]:
        obs, reward, terminated, truncated, info = env.step(action)
        assert info["action_is_valid"] is True
        assert env.player_pos == (0, 0)
        assert obs == obs0 and reward == 0.0 and not terminated and not truncated


@pytest.mark.parametrize("slip_prob", [1.0, 0.0])
def test_slippery(slip_prob):
    n = 7
    env = FrozenLakeTextEnv(size=n, hole_prob=0.0, is_slippery=True, slip_prob=slip_prob)
    rng = np.random.default_rng(0)
    seen = set()
    seed = 0
    env.reset(seed=seed)
    for _ in range(300):
        action = ACTION_NAMES[rng.integers(4)]
        pos = env.player_pos
        _, _, terminated, truncated, info = env.step(action)
        new = env.player_pos
        intended = move(pos, action, n, n)
        if slip_prob == 1.0:
            assert info["effective_action"] in PERPENDICULAR[action]
            assert new in {move(pos, p, n, n) for p in PERPENDICULAR[action]}
            if intended != pos:
                assert new != intended
            seen.add((action, info["effective_action"]))
        else:
            assert info["effective_action"] == action and new == intended
        if terminated or truncated:
            seed += 1
            env.reset(seed=seed)
    if slip_prob == 1.0:
        assert len(seen) == 8  # both perpendicular slips happen for every action


def test_slippery_deterministic_per_seed():
    def run():
        env = FrozenLakeTextEnv(size=6, hole_prob=0.0, is_slippery=True, max_steps=50)
        env.reset(seed=7)
        return [env.step(a)[0] for a in ["Down", "Right", "Up", "Left"] * 5]

    assert run() == run()


def test_truncation_at_max_steps():
    env = FrozenLakeTextEnv(size=4, random_start_goal=False, max_steps=3)
    env.reset(seed=0)
    for i in range(1, 4):
        _, _, terminated, truncated, info = env.step("Up" if i % 2 else "nonsense")
        assert not terminated
        assert truncated is (i == 3)
        assert info["steps"] == i
    env.reset(seed=0)
    _, _, _, truncated, _ = env.step("Up")
    assert not truncated


def test_goal_on_last_step_is_terminated_not_truncated():
    env = FrozenLakeTextEnv(size=4, hole_prob=0.0, random_start_goal=False, max_steps=6)
    env.reset(seed=0)
    for action in ["Down", "Down", "Down", "Right", "Right"]:
        env.step(action)
    _, reward, terminated, truncated, info = env.step("Right")
    assert reward == 1.0 and terminated and not truncated and info["success"]


@pytest.mark.parametrize(
    "kwargs,name",
    [
        ({"size": 1}, "size"),
        ({"size": 3.0}, "size"),
        ({"size": True}, "size"),
        ({"hole_prob": 0.9}, "hole_prob"),
        ({"hole_prob": -0.1}, "hole_prob"),
        ({"hole_prob": "0.2"}, "hole_prob"),
        ({"slip_prob": 1.5}, "slip_prob"),
        ({"slip_prob": -0.01}, "slip_prob"),
        ({"is_slippery": "yes"}, "is_slippery"),
        ({"max_steps": 0}, "max_steps"),
        ({"max_steps": 2.5}, "max_steps"),
        ({"random_start_goal": 1}, "random_start_goal"),
        ({"read": "any"}, "read"),
        ({"render_mode": "human"}, "render_mode"),
    ],
)
def test_kwarg_validation(kwargs, name):
    with pytest.raises(ValueError) as excinfo:
        FrozenLakeTextEnv(**kwargs)
    msg = str(excinfo.value)
    assert name in msg and repr(kwargs[name]) in msg


@pytest.mark.parametrize(
    "kwargs", [{}, {"size": 6, "is_slippery": True}, {"size": 2, "hole_prob": 0.5, "random_start_goal": False},
               {"size": 3, "read": "last"}]
)
def test_check_env_passes(kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(FrozenLakeTextEnv(**kwargs), skip_render_check=True)
        check_env(gymnasium.make("ragen2/FrozenLake-v0", **kwargs).unwrapped, skip_render_check=True)


def test_gymnasium_make_with_kwargs():
    importlib.reload(ragen2_envs)  # registering twice must not fail
    assert "ragen2/FrozenLake-v0" in gymnasium.registry
    env = gymnasium.make("ragen2/FrozenLake-v0", size=5, hole_prob=0.3, max_steps=20)
    assert isinstance(env.unwrapped, FrozenLakeTextEnv)
    assert env.unwrapped.size == 5 and env.unwrapped.max_steps == 20
    obs, info = env.reset(seed=0)
    assert isinstance(obs, str) and len(obs.split("\n")) == 6
    assert "Left, Down, Right, Up" in info["instructions"]
    obs, reward, terminated, truncated, info = env.step("gibberish")
    assert info["action_is_valid"] is False
    _, action = env.unwrapped.demonstration()
    assert action in ACTION_NAMES


def test_instructions():
    env = FrozenLakeTextEnv()
    for word in ["P", "G", "O", "_", "Left", "Down", "Right", "Up"]:
        assert word in env.instructions
    assert "<" not in env.instructions
    assert "slippery" not in env.instructions
    assert "slippery" in FrozenLakeTextEnv(is_slippery=True).instructions
