"""Tests for ragen2/Sokoban-v0."""

import re
import warnings

import gymnasium
import pytest
from gymnasium.utils.env_checker import check_env

import ragen2_envs
from ragen2_envs import SokobanTextEnv
from ragen2_envs.sokoban import solve_sokoban

STATUS_RE = re.compile(r"^You are at row (\d+), column (\d+)\. Boxes on targets: (\d+) of (\d+)\.$")

#   # # # # # #
#   # _ _ _ _ #
#   # P B T _ #
#   # _ _ _ _ #
#   # # # # # #
ONE_BOX = ["######", "#____#", "#PBT_#", "#____#", "######"]

# Two boxes, each two cells left of its target, room to walk around (6 rows x 7 columns).
PUSH_LEVEL = ["#######", "#_____#", "#PB_T_#", "#_____#", "#_B_T_#", "#######"]


def parse_obs(obs, n_rows):
    lines = obs.split("\n")
    assert len(lines) == n_rows + 1, obs
    board = [line.split(" ") for line in lines[:n_rows]]
    m = STATUS_RE.match(lines[-1])
    assert m, lines[-1]
    return board, tuple(int(x) for x in m.groups())


def test_determinism_per_seed():
    a, b = SokobanTextEnv(num_boxes=2), SokobanTextEnv(num_boxes=2)
    for seed in range(10):
        obs_a, info_a = a.reset(seed=seed)
        obs_b, _ = b.reset(seed=seed)
        assert obs_a == obs_b
        assert a.reset(seed=seed)[0] == obs_a
        assert info_a["instructions"] == a.instructions


def test_different_seeds_differ():
    env = SokobanTextEnv()
    assert len({env.reset(seed=seed)[0] for seed in range(20)}) >= 18


@pytest.mark.parametrize("kwargs", [{}, {"size": 7, "num_boxes": 2}, {"size": 5, "num_boxes": 3, "reverse_steps": 5}])
def test_generated_levels_wellformed(kwargs):
    env = SokobanTextEnv(**kwargs)
    n = env.size
    for seed in range(30):
        obs, _ = env.reset(seed=seed)
        board, (pr, pc, on, total) = parse_obs(obs, n)
        assert total == env.num_boxes == len(env.boxes) == len(env.targets)
        assert on < total  # never generated already solved
        assert board[0] == ["#"] * n and board[-1] == ["#"] * n
        assert all(row[0] == "#" and row[-1] == "#" for row in board)
        assert (pr - 1, pc - 1) == env.player_pos and board[pr - 1][pc - 1] in ("P", "+")
        assert sum(row.count("P") + row.count("+") for row in board) == 1
        for r, c in env.boxes:
            assert board[r][c] == ("*" if (r, c) in env.targets else "B")
        assert obs in env.observation_space


@pytest.mark.parametrize("kwargs", [{}, {"size": 7, "num_boxes": 2}])
def test_solver_plan_solves_50_levels(kwargs):
    env = SokobanTextEnv(**kwargs)
    for seed in range(50):
        env.reset(seed=seed)
        plan = env.solve()
        assert plan, seed
        for i, action in enumerate(plan):
            obs, reward, terminated, truncated, info = env.step(action)
            assert info["action_is_valid"] and not truncated
            assert terminated is (i == len(plan) - 1)
        assert info["success"] is True and terminated
        assert reward == pytest.approx(10.9)  # the last push lands a box on a target: -0.1 + 1 + 10
        assert env.boxes <= env.targets
        board = obs.rsplit("\n", 1)[0]
        assert "B" not in board and "T" not in board and board.count("*") == env.num_boxes
        assert obs.endswith(f"Boxes on targets: {env.num_boxes} of {env.num_boxes}.")


def test_solve_sokoban_pure_function():
    walls = [[ch == "#" for ch in row] for row in ONE_BOX]
    assert solve_sokoban(walls, [(2, 2)], [(2, 3)], (2, 1)) == ["Right"]
    assert solve_sokoban(walls, [(2, 3)], [(2, 3)], (2, 1)) == []
    # A box in a corner off target is a deadlock.
    assert solve_sokoban(walls, [(1, 1)], [(2, 3)], (2, 2)) is None
    # State cap.
    assert solve_sokoban(walls, [(2, 2)], [(3, 4)], (2, 1), max_states=2) is None


def test_reward_arithmetic_by_hand():
    env = SokobanTextEnv(size=7)
    obs, info = env.reset(options={"level": PUSH_LEVEL})
    assert info["success"] is False and info["action_is_valid"] is True
    assert obs == (
        "# # # # # # #\n# _ _ _ _ _ #\n# P B _ T _ #\n# _ _ _ _ _ #\n# _ B _ T _ #\n# # # # # # #\n"
        "You are at row 3, column 2. Boxes on targets: 0 of 2."
    )

    def step(action):
        obs, reward, terminated, truncated, info = env.step(action)
        assert info["action_is_valid"] is True and not truncated
        return obs, reward, terminated, info

    # Plain push (box stays off targets): -0.1.
    _, reward, terminated, info = step("Right")
    assert reward == pytest.approx(-0.1) and not terminated and (2, 3) in env.boxes
    # Push the first box onto its target: -0.1 + 1.
    obs, reward, terminated, info = step("Right")
    assert reward == pytest.approx(0.9) and not terminated and not info["success"]
    assert (2, 4) in env.boxes and info["boxes_on_targets"] == 1
    assert obs.split("\n")[2] == "# _ _ P * _ #" and obs.endswith("Boxes on targets: 1 of 2.")
    # Walk above it and push it off (Down): -0.1 - 1.
    assert step("Up")[1] == pytest.approx(-0.1)
    assert step("Right")[1] == pytest.approx(-0.1)
    obs, reward, terminated, info = step("Down")
    assert reward == pytest.approx(-1.1) and not terminated and info["boxes_on_targets"] == 0
    assert env.boxes == {(3, 4), (4, 2)} and env.player_pos == (2, 4)
    assert obs.split("\n")[2] == "# _ _ _ + _ #" and obs.split("\n")[3] == "# _ _ _ B _ #"
    # Walk below it (onto the second target) and push it back (Up): -0.1 + 1.
    for action in ["Left", "Down", "Down", "Right"]:
        assert step(action)[1] == pytest.approx(-0.1)
    obs, reward, terminated, info = step("Up")
    assert reward == pytest.approx(0.9) and not terminated and info["boxes_on_targets"] == 1
    # Second box: walk to its left and push it twice; the last push solves: -0.1 + 1 + 10.
    for action in ["Left", "Left", "Left", "Down"]:
        assert step(action)[1] == pytest.approx(-0.1)
    assert env.player_pos == (4, 1)
    assert step("Right")[1] == pytest.approx(-0.1)
    obs, reward, terminated, info = step("Right")
    assert reward == pytest.approx(10.9) and terminated and info["success"] is True
    assert obs.endswith("Boxes on targets: 2 of 2.")
    # After the end: a no-op with reward 0.
    obs2, reward2, terminated2, truncated2, _ = env.step("Down")
    assert obs2 == obs and reward2 == 0.0 and terminated2 and not truncated2


def test_level_option_validation():
    env = SokobanTextEnv()
    for bad in [
        ["#####", "#P*_#", "#####"],  # already solved
        ["#####", "#PB_#", "#####"],  # no target
        ["#####", "#PBT#", "#_T_#", "#####"],  # 1 box, 2 targets
        ["#####", "#_BT#", "#####"],  # no player
        ["#####", "#PBTx", "#####"],  # unknown symbol / open border
        ["#######"] * 7,  # bigger than size 6
        "#####",
    ]:
        with pytest.raises(ValueError):
            env.reset(options={"level": bad})
    # Spaces between symbols are accepted (the observation format).
    obs, _ = env.reset(options={"level": ["# # # # #", "# P B T #", "# # # # #"]})
    assert obs.startswith("# # # # #\n# P B T #\n")


def test_wall_bump():
    env = SokobanTextEnv()
    obs0, _ = env.reset(options={"level": ONE_BOX})
    for action in ["Left", "Left"]:
        obs, reward, terminated, truncated, info = env.step(action)
        assert info["action_is_valid"] is True and env.player_pos == (2, 1)
        assert obs == obs0 and reward == pytest.approx(-0.1) and not terminated and not truncated


def test_box_blocked_by_wall_and_by_box():
    env = SokobanTextEnv()
    obs0, _ = env.reset(options={"level": ["#####", "#_PB#", "#_T_#", "#####"]})
    obs, reward, terminated, truncated, info = env.step("Right")  # box into the wall
    assert env.player_pos == (1, 2) and env.boxes == {(1, 3)}
    assert obs == obs0 and reward == pytest.approx(-0.1) and info["action_is_valid"] is True
    assert not terminated and not truncated

    obs0, _ = env.reset(options={"level": ["######", "#PBB_#", "#_TT_#", "######"]})
    obs, reward, _, _, info = env.step("Right")  # box into a box
    assert env.player_pos == (1, 1) and env.boxes == {(1, 2), (1, 3)}
    assert obs == obs0 and reward == pytest.approx(-0.1) and info["action_is_valid"] is True


def test_invalid_action():
    env = SokobanTextEnv()
    obs0, _ = env.reset(seed=1)
    pos0, boxes0 = env.player_pos, env.boxes
    for bad in ["xyz", "", "push left", 3, None]:
        obs, reward, terminated, truncated, info = env.step(bad)
        assert info["action_is_valid"] is False and info["success"] is False
        assert reward == pytest.approx(-0.1) and not terminated and not truncated
        assert env.player_pos == pos0 and env.boxes == boxes0
        note, rest = obs.split("\n", 1)
        assert rest == obs0
        assert note.endswith("'. Valid actions: Left, Down, Right, Up.")
        assert obs in env.observation_space
    assert env.step("xyz")[0] == "Invalid action 'xyz'. Valid actions: Left, Down, Right, Up.\n" + obs0
    assert env.step(" up. ")[4]["action_is_valid"] is True


def test_truncation_at_max_steps():
    env = SokobanTextEnv(max_steps=3)
    env.reset(options={"level": ONE_BOX})
    for i in range(1, 4):
        _, _, terminated, truncated, info = env.step("Left" if i % 2 else "nonsense")
        assert not terminated and truncated is (i == 3) and info["steps"] == i
    _, reward, _, truncated, _ = env.step("Right")
    assert truncated and reward == 0.0 and (2, 2) in env.boxes  # no-op after the end
    env.reset(options={"level": ONE_BOX})
    for _ in range(2):
        env.step("Left")
    _, reward, terminated, truncated, info = env.step("Right")  # solved on the last step
    assert terminated and not truncated and info["success"] and reward == pytest.approx(10.9)


@pytest.mark.parametrize(
    "kwargs,name",
    [
        ({"size": 4}, "size"),
        ({"size": 6.0}, "size"),
        ({"size": True}, "size"),
        ({"num_boxes": 0}, "num_boxes"),
        ({"num_boxes": 4}, "num_boxes"),
        ({"num_boxes": "1"}, "num_boxes"),
        ({"reverse_steps": 0}, "reverse_steps"),
        ({"reverse_steps": 2.5}, "reverse_steps"),
        ({"max_steps": 0}, "max_steps"),
        ({"max_steps": None}, "max_steps"),
        ({"render_mode": "human"}, "render_mode"),
    ],
)
def test_kwarg_validation(kwargs, name):
    with pytest.raises(ValueError) as excinfo:
        SokobanTextEnv(**kwargs)
    msg = str(excinfo.value)
    assert name in msg and repr(kwargs[name]) in msg


@pytest.mark.parametrize("kwargs", [{}, {"size": 5, "num_boxes": 3, "reverse_steps": 1}])
def test_check_env_passes(kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(SokobanTextEnv(**kwargs), skip_render_check=True)
        check_env(gymnasium.make("ragen2/Sokoban-v0", **kwargs).unwrapped, skip_render_check=True)


def test_gymnasium_make_with_kwargs():
    assert "ragen2/Sokoban-v0" in gymnasium.registry and "ragen2/Sokoban-v0" in ragen2_envs.ENV_IDS
    env = gymnasium.make("ragen2/Sokoban-v0", size=7, num_boxes=2)
    assert isinstance(env.unwrapped, SokobanTextEnv)
    assert env.unwrapped.size == 7 and env.unwrapped.num_boxes == 2
    obs, info = env.reset(seed=0)
    _, (_, _, _, total) = parse_obs(obs, 7)
    assert total == 2
    assert "Left, Down, Right, Up" in info["instructions"]
    assert env.step("gibberish")[4]["action_is_valid"] is False


def test_demonstration_matches_solver():
    env = gymnasium.make("ragen2/Sokoban-v0", size=6, num_boxes=2)
    for seed in range(10):
        obs, _ = env.reset(seed=seed)
        done = False
        while not done:
            reasoning, action = env.unwrapped.demonstration()
            assert action == env.unwrapped.solve()[0]
            _, (pr, pc, on, total) = parse_obs(obs, 6)
            assert reasoning == (
                f"I am at row {pr}, column {pc}. Boxes on targets: {on} of {total}. "
                f"The plan starts {action}."
            )
            obs, reward, terminated, truncated, info = env.step(action)
            done = terminated or truncated
        assert info["success"] and terminated
        with pytest.raises(RuntimeError):
            env.unwrapped.demonstration()


def test_instructions():
    env = SokobanTextEnv()
    for word in ["#", "_", "P", "B", "T", "*", "+", "Left", "Down", "Right", "Up"]:
        assert word in env.instructions
    assert SokobanTextEnv.valid_actions == ("Left", "Down", "Right", "Up")


def test_demonstration_in_a_dead_state_says_so_and_moves():
    # a box pushed into a corner can never reach its target: the expert keeps playing
    env = SokobanTextEnv(size=5)
    env.reset(seed=0, options={"level": ["#####", "#B_T#", "#_P_#", "#___#", "#####"]})
    assert env.solve() is None
    reasoning, action = env.demonstration()
    assert reasoning.endswith("No plan is left from here.")
    assert action == "Left"
