"""Tests for ragen2/Math-v0 and its answer checking."""

import json
import re
import warnings
from fractions import Fraction

import gymnasium
import pytest
from gymnasium.utils.env_checker import check_env

import ragen2_envs  # noqa: F401  (registers the ids)
from ragen2_envs import MathTextEnv
from ragen2_envs.math_env import SAMPLE_DATASET, answers_match, load_dataset, parse_number

# ---------------------------------------------------------------- answer parsing


@pytest.mark.parametrize(
    "text,expected",
    [
        ("42", Fraction(42)),
        ("  42.  ", Fraction(42)),
        ("-8", Fraction(-8)),
        ("\u22128", Fraction(-8)),
        ("+5", Fraction(5)),
        ("0.50", Fraction(1, 2)),
        (".5", Fraction(1, 2)),
        ("3/4", Fraction(3, 4)),
        ("3 / 4", Fraction(3, 4)),
        ("1 1/2", Fraction(3, 2)),
        ("1,234", Fraction(1234)),
        ("1,234,567.25", Fraction(123456725, 100)),
        ("12 apples", Fraction(12)),
        ("$7", Fraction(7)),
        ("-$7.50", Fraction(-15, 2)),
        ("7 dollars.", Fraction(7)),
        ("12%", Fraction(12)),
        ("The answer is 42.", Fraction(42)),
        ("", None),
        ("   ", None),
        ("no idea", None),
        ("3 or 4", None),
        ("5-3", None),
        ("12,5", None),  # not a thousands grouping: two numbers
        ("1/0", None),
        (None, None),
        (42, None),
    ],
)
def test_parse_number(text, expected):
    assert parse_number(text) == expected


@pytest.mark.parametrize(
    "given,expected,match",
    [
        ("1,234", 1234, True),
        ("0.5", "1/2", True),
        ("0.50", ".5", True),
        ("3/4", "0.75", True),
        ("12 apples", 12, True),
        ("$7", 7, True),
        ("-8", -8, True),
        ("11.75", Fraction(47, 4), True),
        ("0.1", 0.1, True),
        ("12.01", 12, False),
        ("8", -8, False),
        ("2/3", "0.67", False),
        ("", 12, False),
        ("twelve", 12, False),
        ("12 13", 12, False),
    ],
)
def test_answers_match(given, expected, match):
    assert answers_match(given, expected) is match


def test_answers_match_rejects_bad_expected():
    with pytest.raises(ValueError):
        answers_match("1", "no number")


# ---------------------------------------------------------------- generation


@pytest.mark.parametrize("difficulty", [1, 2, 3])
def test_determinism_per_seed(difficulty):
    a, b = MathTextEnv(difficulty=difficulty), MathTextEnv(difficulty=difficulty)
    for seed in range(20):
        obs_a, info_a = a.reset(seed=seed)
        obs_b, _ = b.reset(seed=seed)
        assert obs_a == obs_b and a.answer == b.answer
        assert a.reset(seed=seed)[0] == obs_a
        assert info_a["instructions"] == a.instructions
        assert obs_a.endswith("\nAnswer with the number only.")
        assert obs_a in a.observation_space
    assert len({a.reset(seed=s)[0] for s in range(30)}) >= 20


def _numbers(text):
    return [Fraction(t) for t in re.findall(r"-?\d+(?:\.\d+)?", text)]


@pytest.mark.parametrize("difficulty", [1, 2, 3])
def test_demonstration_is_accepted(difficulty):
    env = MathTextEnv(difficulty=difficulty)
    for seed in range(100):
        obs, _ = env.reset(seed=seed)
        reasoning, action = env.demonstration()
        assert parse_number(action) == env.answer
        assert reasoning.endswith(".") and action in reasoning
        # the reasoning restates the problem's numbers
        for n in _numbers(env.problem):
            assert n in _numbers(reasoning), (env.problem, reasoning)
        obs, reward, terminated, truncated, info = env.step(action)
        assert reward == 1.0 and terminated and not truncated
        assert info == {"success": True, "action_is_valid": True, "attempt": 1, "attempts_left": 2}
        assert obs.startswith(f"Correct! The answer is {action}.\n")
        with pytest.raises(RuntimeError):
            env.demonstration()


def test_difficulty_shapes():
    env1, env2, env3 = (MathTextEnv(difficulty=d) for d in (1, 2, 3))
    kinds3 = set()
    for seed in range(200):
        env1.reset(seed=seed)
        assert re.fullmatch(r"What is \d+ [+-] \d+\?", env1.problem)
        env2.reset(seed=seed)
        assert re.fullmatch(r"What is \d+ [*+-] \d+ [*+-] \d+\?", env2.problem)
        assert env2.problem.count("*") == 1
        env3.reset(seed=seed)
        ans = env3.answer
        kinds3.add("int" if ans.denominator == 1 else "frac" if "/" in env3.demonstration()[1] else "dec")
    assert kinds3 == {"int", "frac", "dec"}


def test_max_operand_bounds_difficulty_one():
    env = MathTextEnv(difficulty=1, max_operand=9)
    seen = set()
    for seed in range(300):
        env.reset(seed=seed)
        a, op, b = re.fullmatch(r"What is (\d+) ([+-]) (\d+)\?", env.problem).groups()
        assert 1 <= int(a) <= 9 and 1 <= int(b) <= 9
        assert env.answer == (int(a) + int(b) if op == "+" else int(a) - int(b))
        seen.update((int(a), int(b)))
    assert seen == set(range(1, 10))
    assert MathTextEnv(difficulty=1, max_operand=1).reset(seed=0)[0].startswith(("What is 1 + 1?",
                                                                                  "What is 1 - 1?"))


def test_read_last_takes_the_last_number_of_a_worked_reply():
    from ragen2_envs.math_env import last_number

    assert last_number("7 - 5 = 2") == 2 and last_number("2 + 9 = 18. The answer is 18.") == 18
    assert last_number("8-6=-2") == -2 and last_number("1/2 of 3 is 1 1/2") == Fraction(3, 2)
    assert last_number("no number") is None and last_number(None) is None
    only, last = MathTextEnv(read="only"), MathTextEnv(read="last")
    for env in (only, last):
        env.reset(seed=0)
    worked = f"{only.problem.removeprefix('What is ').rstrip('?')} = {only.answer}"
    assert not only.step(worked)[4]["action_is_valid"]  # three numbers: unreadable
    _, reward, done, _, info = last.step(worked)
    assert info["success"] and reward == 1.0 and done


def test_arithmetic_checked_independently():
    env = MathTextEnv(difficulty=2)
    for seed in range(50):
        env.reset(seed=seed)
        expr = env.problem[len("What is "):-1]
        assert env.answer == eval(expr)  # trusted, generated text: digits and + - * only


# ---------------------------------------------------------------- attempts and rewards


def test_reward_decay_across_attempts():
    env = MathTextEnv(difficulty=1, max_attempts=3, decay=0.5)
    obs0, _ = env.reset(seed=4)
    wrong = str(env.answer + 1)
    obs, reward, terminated, truncated, info = env.step(wrong)
    assert (reward, terminated, truncated) == (0.0, False, False)
    assert info == {"success": False, "action_is_valid": True, "attempt": 1, "attempts_left": 2}
    assert obs == "Incorrect, try again. Attempts left: 2.\n" + obs0
    obs, reward, terminated, _, info = env.step(wrong)
    assert reward == 0.0 and not terminated and info["attempt"] == 2
    assert obs == "Incorrect, try again. Attempts left: 1.\n" + obs0
    _, action = env.demonstration()
    obs, reward, terminated, _, info = env.step(action)
    assert reward == 0.25 and terminated and info["success"] and info["attempt"] == 3

    env2 = MathTextEnv(max_attempts=4, decay=0.8)
    env2.reset(seed=0)
    env2.step("no")
    _, reward, _, _, _ = env2.step(env2.demonstration()[1])
    assert reward == pytest.approx(0.8)


def test_direction_feedback_says_too_high_or_too_low():
    env = MathTextEnv(difficulty=1, max_operand=9, max_attempts=3, read="last",
                      feedback="direction")
    assert "too high or too low" in env.instructions
    assert "too high" not in MathTextEnv(max_attempts=3).instructions
    assert "too high" not in MathTextEnv(max_attempts=1, feedback="direction").instructions
    obs0, _ = env.reset(seed=4)
    high, low = env.answer + 3, env.answer - 1
    obs, reward, terminated, _, info = env.step(f"I think it is {high}")
    assert (reward, terminated, info["attempt"]) == (0.0, False, 1)
    assert obs == f"Incorrect: {high} is too high, try again. Attempts left: 2.\n" + obs0
    obs, _, terminated, _, _ = env.step(f"= {low}")
    assert obs == f"Incorrect: {low} is too low, try again. Attempts left: 1.\n" + obs0
    assert not terminated
    obs, reward, terminated, _, info = env.step(str(env.answer))
    assert terminated and info["success"] and reward == 0.25
    # unreadable answers and the last attempt read as before
    env.reset(seed=4)
    obs, _, _, _, info = env.step("no idea")
    assert obs == "No number found in your answer, try again. Attempts left: 2.\n" + obs0
    env.step(str(high))
    obs, _, terminated, _, _ = env.step(str(high))
    assert terminated and obs == "Incorrect. No attempts left.\n" + obs0
    # a fraction is echoed as read
    frac = MathTextEnv(difficulty=1, max_attempts=2, feedback="direction")
    frac.reset(seed=0)
    assert frac.step("1/2")[0].startswith(f"Incorrect: 1/2 is too {'high' if frac.answer < 0.5 else 'low'}")


def test_max_attempts_exhaustion():
    env = MathTextEnv(difficulty=3, max_attempts=2)
    obs0, _ = env.reset(seed=1)
    wrong = str(env.answer + 1)
    env.step(wrong)
    obs, reward, terminated, truncated, info = env.step(wrong)
    assert reward == 0.0 and terminated and not truncated
    assert info == {"success": False, "action_is_valid": True, "attempt": 2, "attempts_left": 0}
    assert obs == "Incorrect. No attempts left.\n" + obs0
    # after the end: no-op, even for the right answer
    obs2, reward2, terminated2, _, info2 = env.step(str(env.answer))
    assert obs2 == obs and reward2 == 0.0 and terminated2 and info2["attempt"] == 2
    assert not info2["success"]

    single = MathTextEnv(max_attempts=1)
    single.reset(seed=0)
    _, reward, terminated, _, info = single.step("-100000")
    assert terminated and reward == 0.0 and not info["success"]


def test_invalid_answer_counts_as_attempt():
    env = MathTextEnv(max_attempts=2)
    obs0, _ = env.reset(seed=2)
    obs, reward, terminated, _, info = env.step("I don't know")
    assert info["action_is_valid"] is False and info["attempt"] == 1 and not info["success"]
    assert reward == 0.0 and not terminated
    assert obs == "No number found in your answer, try again. Attempts left: 1.\n" + obs0
    _, reward, terminated, _, info = env.step("")
    assert info["action_is_valid"] is False and terminated and reward == 0.0


def test_step_before_reset():
    with pytest.raises(RuntimeError):
        MathTextEnv().step("1")
    with pytest.raises(RuntimeError):
        MathTextEnv().demonstration()


# ---------------------------------------------------------------- datasets


def test_shipped_sample_dataset():
    problems = load_dataset(SAMPLE_DATASET)
    assert len(problems) == 8
    for question, reasoning, answer in problems:
        assert question and reasoning and parse_number(answer) is not None
    # every calculator annotation is right and the last one is the final answer
    for line in SAMPLE_DATASET.read_text().splitlines():
        row = json.loads(line)
        calcs = re.findall(r"<<([^=<>]+)=([^<>]+)>>", row["answer"])
        assert calcs
        for expr, result in calcs:
            assert Fraction(eval(expr)).limit_denominator(1000) == parse_number(result), expr
        assert parse_number(calcs[-1][1]) == parse_number(row["answer"].rsplit("####", 1)[1])

    env = MathTextEnv(dataset_path=str(SAMPLE_DATASET))
    seen = set()
    for seed in range(60):
        obs, _ = env.reset(seed=seed)
        assert env.reset(seed=seed)[0] == obs
        assert obs in env.observation_space
        seen.add(env.problem)
        reasoning, action = env.demonstration()
        assert "<<" not in reasoning and "####" not in reasoning
        _, reward, terminated, _, info = env.step(action)
        assert reward == 1.0 and terminated and info["success"]
    assert seen == {q for q, _, _ in problems}


def test_dataset_from_tmp_file(tmp_path):
    path = tmp_path / "mini.jsonl"
    rows = [
        {"question": "Kim has 3 bags of 4 plums. How many plums?", "answer": "3 * 4 = 12\n#### 12"},
        {"question": "Half of 5 is?", "answer": "#### 2.5"},
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    env = gymnasium.make("ragen2/Math-v0", dataset_path=path).unwrapped
    answers = set()
    for seed in range(20):
        obs, _ = env.reset(seed=seed)
        assert obs.split("\n")[0] in {r["question"] for r in rows}
        answers.add(env.answer)
    assert answers == {Fraction(12), Fraction(5, 2)}
    env.reset(seed=0)
    while env.answer != Fraction(5, 2):
        env.reset()
    assert env.demonstration() == ("The answer is 2.5.", "2.5")
    assert env.step("5/2")[1] == 1.0


@pytest.mark.parametrize(
    "bad_line,what",
    [
        ("{not json", "invalid JSON"),
        ('["a list"]', "not a JSON object"),
        ('{"answer": "#### 3"}', "question"),
        ('{"question": "Q?"}', "answer"),
        ('{"question": "Q?", "answer": "3"}', "####"),
        ('{"question": "Q?", "answer": "#### three"}', "####"),
    ],
)
def test_malformed_dataset_line(tmp_path, bad_line, what):
    path = tmp_path / "bad.jsonl"
    good = json.dumps({"question": "1 + 1?", "answer": "#### 2"})
    path.write_text(f"{good}\n{good}\n{bad_line}\n")
    with pytest.raises(ValueError) as excinfo:
        MathTextEnv(dataset_path=str(path))
    msg = str(excinfo.value)
    assert "line 3" in msg and "bad.jsonl" in msg and what in msg


def test_empty_or_missing_dataset(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(ValueError, match="no problems"):
        MathTextEnv(dataset_path=str(empty))
    with pytest.raises(ValueError, match="dataset_path"):
        MathTextEnv(dataset_path=str(tmp_path / "missing.jsonl"))


# ---------------------------------------------------------------- construction / registration


@pytest.mark.parametrize(
    "kwargs,name",
    [
        ({"difficulty": 0}, "difficulty"),
        ({"difficulty": 4}, "difficulty"),
        ({"difficulty": 2.0}, "difficulty"),
        ({"difficulty": True}, "difficulty"),
        ({"max_operand": 0}, "max_operand"),
        ({"max_operand": 100}, "max_operand"),
        ({"max_operand": 9.0}, "max_operand"),
        ({"read": "first"}, "read"),
        ({"feedback": "hint"}, "feedback"),
        ({"max_attempts": 0}, "max_attempts"),
        ({"max_attempts": "3"}, "max_attempts"),
        ({"decay": 0.0}, "decay"),
        ({"decay": 1.5}, "decay"),
        ({"decay": "0.5"}, "decay"),
        ({"dataset_path": 5}, "dataset_path"),
        ({"render_mode": "human"}, "render_mode"),
    ],
)
def test_kwarg_validation(kwargs, name):
    with pytest.raises(ValueError) as excinfo:
        MathTextEnv(**kwargs)
    msg = str(excinfo.value)
    assert name in msg and repr(kwargs[name]) in msg


@pytest.mark.parametrize(
    "kwargs", [{}, {"difficulty": 2}, {"difficulty": 3, "max_attempts": 1}, {"dataset_path": str(SAMPLE_DATASET)},
               {"feedback": "direction", "read": "last"}]
)
def test_check_env_passes(kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(MathTextEnv(**kwargs), skip_render_check=True)
        check_env(gymnasium.make("ragen2/Math-v0", **kwargs).unwrapped, skip_render_check=True)


def test_gymnasium_make():
    assert "ragen2/Math-v0" in gymnasium.registry
    assert ragen2_envs.ENV_IDS["ragen2/Math-v0"] == "ragen2_envs.math_env:MathTextEnv"
    env = gymnasium.make("ragen2/Math-v0", difficulty=2)
    assert isinstance(env.unwrapped, MathTextEnv) and env.unwrapped.difficulty == 2
    obs, info = env.reset(seed=0)
    assert "*" in obs and "number only" in info["instructions"]
    _, _, _, _, info = env.step("gibberish")
    assert info["action_is_valid"] is False
    _, action = env.unwrapped.demonstration()
    _, reward, terminated, _, _ = env.step(action)
    assert reward == 0.5 and terminated


def test_render():
    env = MathTextEnv(render_mode="ansi")
    assert env.render() is None
    obs, _ = env.reset(seed=0)
    assert env.render() == obs
    assert MathTextEnv().render() is None
