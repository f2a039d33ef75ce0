"""ragen2/Countdown-v0: exact equation checking, rewards, solvable puzzles, hostile answers."""

from fractions import Fraction

import gymnasium
import pytest
from gymnasium.utils.env_checker import check_env

import ragen2_envs  # noqa: F401  (registers the ids)
from ragen2_envs.countdown import (CountdownTextEnv, EquationError, evaluate_equation,
                                   last_equation, solve)


@pytest.mark.parametrize("text, value", [
    ("2 + 5 - 3", Fraction(4)),
    ("(5 - 3) * 2", Fraction(4)),
    ("2 + 5 - 3 = 4", Fraction(4)),
    (" 5 / 2 * 3. ", Fraction(15, 2)),
    ("5 × 3 − 2", Fraction(13)),
    ("-3 + 5 * 2", Fraction(7)),
])
def test_equations_are_evaluated_exactly(text, value):
    assert evaluate_equation(text, [5, 3, 2]) == value


@pytest.mark.parametrize("text, why", [
    ("2 + 5", "every number of"),                 # 3 unused
    ("2 + 5 - 3 - 3", "every number of"),         # 3 twice
    ("7 - 3", "every number of"),                 # a number not given
    ("2 ** 5 - 3", "allowed, not BinOp"),          # a power: not one of the four operators
    ("__import__('os').system('x')", "allowed, not Call"),
    ("(5).real + 3 - 2", "allowed, not Attribute"),
    ("2 + 5 - 3 = 4 = 4", "more than one"),
    ("2 + + ", "not an arithmetic expression"),
    ("", "empty"),
    ("1 * " * 100 + "1", "longer than"),
])
def test_hostile_or_wrong_answers_are_refused_by_name(text, why):
    with pytest.raises(EquationError, match=why):
        evaluate_equation(text, [5, 3, 2])


def test_division_by_zero_is_an_invalid_equation():
    with pytest.raises(EquationError, match="division by zero"):
        evaluate_equation("5 / (3 - 3)", [5, 3, 3])


def test_solver_finds_known_solutions_and_reports_none():
    assert evaluate_equation(solve([3, 5, 2], 4), [3, 5, 2]) == 4
    assert evaluate_equation(solve([4, 7, 8, 8], 24), [4, 7, 8, 8]) == 24
    assert solve([1, 1], 5) is None  # 1+1, 1-1, 1*1, 1/1: none is 5


def test_every_generated_puzzle_is_solvable_and_the_expert_solves_it():
    env = CountdownTextEnv(num_count=4, max_number=20)
    for seed in range(40):
        obs, info = env.reset(seed=seed)
        assert f"Target: {env.target}." in obs and info["instructions"]
        assert solve(env.numbers, env.target) is not None
        reasoning, answer = env.demonstration()
        assert evaluate_equation(answer, env.numbers) == env.target and str(env.target) in reasoning
        obs, reward, terminated, truncated, info = env.step(answer)
        assert (reward, terminated, truncated, info["success"]) == (1.0, True, False, True)


def test_rewards_wrong_then_invalid_with_retries():
    env = CountdownTextEnv(num_count=3, max_attempts=3)
    env.reset(seed=1)
    wrong = " + ".join(map(str, env.numbers))
    expected = sum(env.numbers)
    obs, reward, terminated, _, info = env.step(wrong)
    if expected != env.target:
        assert reward == pytest.approx(0.1) and not terminated and info["action_is_valid"]
        assert f"it equals {expected}" in obs and "Attempts left: 2" in obs
    obs, reward, terminated, _, info = env.step("banana")
    assert reward == 0.0 and not info["action_is_valid"] and "Invalid equation" in obs
    _, answer = env.demonstration()
    assert env.step(answer)[1] == 1.0


@pytest.mark.parametrize("text,equation", [
    ("2 + 5", "2 + 5"),
    ("2 + 5 = 7\n7 - 3 = 4", "7 - 3"),
    ("So (10 - 3) * 2 = 14.", "(10 - 3) * 2"),
    ("Step 1: 3 + 5", "3 + 5"),           # the longest expression of the line, not the "1"
    ("3 \u00d7 4 \u2212 2\nThe answer is 10.", "3 * 4 - 2"),  # a last line without one is skipped
    ("The answer is 12.", None),
    (None, None),
])
def test_last_equation_reads_a_worked_reply(text, equation):
    assert last_equation(text) == equation


def test_read_last_steps_the_equation_a_reply_ends_on():
    strict = CountdownTextEnv(num_count=2, max_attempts=2)
    lenient = CountdownTextEnv(num_count=2, max_attempts=2, read="last")
    for env in (strict, lenient):
        env.reset(seed=3)
    _, answer = lenient.demonstration()
    reply = f"Let me try.\n{answer} = {lenient.target}"
    assert not strict.step(reply)[4]["action_is_valid"]
    _, reward, terminated, _, info = lenient.step(reply)
    assert (reward, terminated, info["success"]) == (1.0, True, True)
    lenient.reset(seed=3)
    obs, reward, terminated, _, info = lenient.step("I do not know.")
    assert (reward, terminated, info["action_is_valid"]) == (0.0, False, False)
    assert obs.startswith("Invalid equation: no arithmetic expression found. Attempts left: 1.")
    assert lenient.problem_key() == strict.problem_key()


def test_registered_and_passes_gymnasium_checks():
    env = gymnasium.make("ragen2/Countdown-v0")
    check_env(env.unwrapped, skip_render_check=True)
    assert isinstance(env.unwrapped, CountdownTextEnv)


@pytest.mark.parametrize("kwargs", [{"num_count": 1}, {"max_number": 1}, {"format_score": 1.0},
                                    {"max_attempts": 0}, {"read": "first"}])
def test_bad_kwargs_are_refused(kwargs):
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        CountdownTextEnv(**kwargs)
