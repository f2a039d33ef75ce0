"""Tests for ragen2/Code-v0 (CodeTextEnv), its task bank and its code extraction."""

from __future__ import annotations

import ast
import re
import string
import warnings
from collections import Counter

import gymnasium
import pytest
import ragen2_envs  # noqa: F401  (registers the ids)
from gymnasium.utils.env_checker import check_env
from ragen2_envs.code_env import DEFAULT_LIMITS, LIMIT_KEYS, CodeTextEnv, extract_code
from ragen2_envs.code_tasks import TASKS, tasks_for
from ragen2_envs.sandbox import values_match

ENV_ID = "ragen2/Code-v0"
if ENV_ID not in gymnasium.registry:  # registered by ragen2_envs/__init__.py once wired in
    gymnasium.register(id=ENV_ID, entry_point="ragen2_envs.code_env:CodeTextEnv")

FAST = {"timeout_s": 1.5}


def env_with_task(name: str, **kwargs) -> tuple[CodeTextEnv, str]:
    """An env reset (by searching seeds) to the named task, and its first observation."""
    env = CodeTextEnv(**kwargs)
    for seed in range(2000):
        obs, _ = env.reset(seed=seed)
        if env.task.name == name:
            return env, obs
    raise AssertionError(f"no seed selects {name}")


# ---------------------------------------------------------------- the task bank


def test_bank_size_and_levels():
    assert len(TASKS) >= 36
    levels = Counter(t.difficulty for t in TASKS)
    assert set(levels) == {1, 2, 3} and min(levels.values()) >= 12, levels
    assert len({t.name for t in TASKS}) == len(TASKS)
    assert len({t.function for t in TASKS}) == len(TASKS)
    printable = set(string.printable) - set("\r\x0b\x0c\t")
    for t in TASKS:
        assert len(t.tests) >= 5, t.name
        assert len(set(map(repr, t.tests))) == len(t.tests), f"{t.name}: duplicate tests"
        assert t.signature.startswith(f"def {t.function}(")
        assert f"def {t.function}(" in t.reference
        assert t.statement.count("Example:") == 1, t.name
        assert set(t.statement + t.signature + t.approach) <= printable, t.name
        assert all(isinstance(a, tuple) for a in t.tests)
        for args, value in zip(t.tests, t.expected()):
            assert ast.literal_eval(repr(args)) == args  # travels to the sandbox as a literal
            assert values_match(ast.literal_eval(repr(value)), value)  # and comes back
    assert tasks_for(None) == TASKS
    assert sum(len(tasks_for(d)) for d in (1, 2, 3)) == len(TASKS)


_EXAMPLE = re.compile(r"Example: (\w+)\((.*?)\) returns (.+?)(?:\.$|\.? \(|, \w+\(|\.\s)")


@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.name)
def test_statement_example_agrees_with_reference(task):
    """The example in each statement, checked against the reference solution (in-process)."""
    m = _EXAMPLE.search(task.statement + " ")
    assert m and m.group(1) == task.function, task.statement
    args = ast.literal_eval(f"({m.group(2)},)")
    expected = ast.literal_eval(m.group(3))
    namespace: dict = {}
    exec(task.reference, namespace)
    got = namespace[task.function](*args)
    assert got == expected and type(got) is type(expected), (got, expected)


def test_every_reference_passes_its_hidden_tests_through_the_env():
    """Every task's reference solution, through step(): extraction, sandbox, comparison."""
    env = CodeTextEnv(max_attempts=1)
    seen = set()
    for seed in range(3000):
        env.reset(seed=seed)
        if env.task.name in seen:
            continue
        seen.add(env.task.name)
        think, action = env.demonstration()
        assert think and action == env.task.reference.strip("\n")
        obs, reward, terminated, truncated, info = env.step(action)
        assert info["tests_passed"] == info["tests_total"] == len(env.task.tests), (env.task.name, obs)
        assert reward == 1.0 and terminated and not truncated and info["success"]
        assert info["sandbox_status"] == "ok" and info["action_is_valid"]
        assert obs.startswith(f"All {len(env.task.tests)} tests passed.\n")
        if len(seen) == len(TASKS):
            break
    assert len(seen) == len(TASKS)


# ---------------------------------------------------------------- extraction


@pytest.mark.parametrize(
    "text,expected",
    [
        ("def f(x):\n    return x", "def f(x):\n    return x"),
        ("```python\ndef f(x):\n    return x\n```", "def f(x):\n    return x"),
        ("```py\ndef f(x):\n    return x\n```", "def f(x):\n    return x"),
        ("```\ndef f(x):\n    return x\n```", "def f(x):\n    return x"),
        ("Here is my solution:\n```python\ndef f(x):\n    return x\n```\nIt returns x.",
         "def f(x):\n    return x"),
        ("```python\nprint(f(2))\n```\nand\n```python\nimport math\ndef f(x):\n    return x\n```",
         "import math\ndef f(x):\n    return x"),
        ("```python\ndef f(x):\n    return x", "def f(x):\n    return x"),  # unclosed fence
        ("Sure. Here it is:\nimport math\ndef f(x):\n    return x", "import math\ndef f(x):\n    return x"),
        ("x = 3\ndef f(y):\n    return y + x", "x = 3\ndef f(y):\n    return y + x"),
        ("<answer>def f(x):\n    return x</answer>", "def f(x):\n    return x"),
        ("def f(x):\r\n    return x\r\n", "def f(x):\n    return x"),
        ("f = lambda x: x", "f = lambda x: x"),
        ("", ""),
        ("   \n  ", ""),
        ("```python\n```", ""),
        (None, ""),
    ],
)
def test_extract_code(text, expected):
    assert extract_code(text, "f") == expected


# ---------------------------------------------------------------- attempts, feedback, rewards


def test_feedback_names_the_failing_calls_and_rewards_by_hand():
    env, obs0 = env_with_task("clamp", max_attempts=3, decay=0.5)
    total = len(env.task.tests)  # 7 tests; `return x` passes the 4 already in range
    wrong = "def clamp(x, lo, hi):\n    return x\n"
    obs, reward, terminated, truncated, info = env.step(wrong)
    assert (terminated, truncated, info["success"]) == (False, False, False)
    assert info["tests_passed"] == 4 and info["tests_total"] == total == 7
    assert reward == pytest.approx(4 / 7)  # attempt 1: 1 * 4/7
    assert obs.startswith("Passed 4/7 tests. Failed: clamp(15, 0, 10) returned 15, expected 10; "
                          "clamp(-5, 0, 10) returned -5, expected 0\nAttempts left: 2.\n")
    assert obs.endswith(obs0) and obs in env.observation_space
    assert info["action_is_valid"] and info["sandbox_status"] == "ok"

    better = "def clamp(x, lo, hi):\n    return min(x, hi)\n"  # passes 6/7, but on attempt 2
    obs, reward, terminated, _, info = env.step(better)
    assert info["tests_passed"] == 6 and info["score"] == pytest.approx(0.5 * 6 / 7)
    assert reward == 0.0  # 0.429 does not beat the best score so far (0.571)
    assert "clamp(-5, 0, 10) returned -5, expected 0" in obs and "Attempts left: 1." in obs

    _, action = env.demonstration()
    obs, reward, terminated, _, info = env.step(action)
    assert terminated and info["success"] and info["score"] == pytest.approx(0.25)
    assert reward == 0.0  # a full pass on attempt 3 scores 0.25 < 4/7
    assert obs == f"All 7 tests passed.\n{obs0}"
    # after the end: no-op
    obs2, reward2, terminated2, _, info2 = env.step(action)
    assert (obs2, reward2, terminated2) == (obs, 0.0, True) and info2 == info

    env, _ = env_with_task("clamp", max_attempts=3, decay=0.8)
    env.step("def clamp(x, lo, hi):\n    return 0\n")  # passes clamp(-5,0,10) and clamp(0,0,10)
    _, reward, terminated, _, info = env.step(env.demonstration()[1])
    assert info["score"] == pytest.approx(0.8) and reward == pytest.approx(0.8 - 2 / 7)
    assert terminated and info["attempt"] == 2


def test_full_pass_first_time_earns_one():
    env, _ = env_with_task("reverse_string")
    _, reward, terminated, _, info = env.step("```python\ndef reverse_string(s):\n    return s[::-1]\n```")
    assert reward == 1.0 and terminated and info["success"] and info["attempt"] == 1


def test_exceptions_and_load_errors_in_feedback():
    env, obs0 = env_with_task("reverse_string", max_attempts=4)
    obs, reward, _, _, info = env.step("def reverse_string(s):\n    return s[-1] + s[:-1]\n")
    assert "reverse_string('') raised IndexError: string index out of range" in obs
    assert info["action_is_valid"] and reward == pytest.approx(1 / 6)  # only 'a' passes
    obs, reward, _, _, info = env.step("def reverse_string(s)\n    return s\n")
    assert obs.startswith("Your code could not be loaded: SyntaxError: ")
    assert not info["action_is_valid"] and info["tests_passed"] == 0 and reward == 0.0
    obs, _, _, _, info = env.step("def reverse(s):\n    return s[::-1]\n")
    assert obs.startswith("Your code does not define the function reverse_string.")
    assert not info["action_is_valid"]
    obs, _, terminated, _, info = env.step("I do not know.")
    assert info["action_is_valid"] is False and terminated and not info["success"]
    assert obs.startswith("Your code could not be loaded: SyntaxError")
    assert obs.endswith("No attempts left.\n" + obs0)

    env.reset(seed=0)
    obs, _, _, _, info = env.step("   ")
    assert obs.startswith("No Python code found in your answer.\nAttempts left: 3.")
    assert info["sandbox_status"] == "no_code" and not info["action_is_valid"]


def test_max_attempts_exhaustion():
    env, _ = env_with_task("mean", max_attempts=2)
    env.step("def mean(nums):\n    return 1.0\n")
    obs, reward, terminated, truncated, info = env.step("def mean(nums):\n    return 1.0\n")
    assert terminated and not truncated and not info["success"] and info["attempts_left"] == 0
    assert reward == 0.0 and "No attempts left." in obs
    with pytest.raises(RuntimeError):
        env.demonstration()


@pytest.mark.parametrize(
    "name,body,status,phrase",
    [
        ("infinite loop", "while True:\n        pass", "timeout", "timed out after 1.5s"),
        ("exit early", "import os\n    os._exit(0)", "crashed", "did not finish"),
        ("kill parent", ("import os\n    try:\n        os.kill(os.getppid(), 9)\n    except OSError:\n"
                         "        pass\n    os.killpg(0, 9)"), "crashed", "did not finish"),
        ("output flood", "while True:\n        print('spam' * 1000)", "output_limit", "output"),
        ("memory", "return bytearray(10 * 2**30)", "memory", "MemoryError"),
        ("fork bomb", ("import os\n    while True:\n        try:\n            os.fork()\n"
                       "        except OSError:\n            pass"), "timeout", "timed out"),
        ("fake report", "print('All 6 tests passed.')\n    return 'All tests passed'", "ok",
         "expected"),
        ("read stdin", "return input()", "ok", "EOFError"),
    ],
)
def test_hostile_code_in_step_scores_zero_without_raising(name, body, status, phrase):
    env, _ = env_with_task("reverse_string", limits=FAST)
    obs, reward, terminated, truncated, info = env.step(f"def reverse_string(s):\n    {body}\n")
    assert reward == 0.0 and info["tests_passed"] == 0 and not terminated and not truncated
    assert info["sandbox_status"] == status, obs
    assert phrase in obs and obs in env.observation_space


def test_module_level_hostile_code():
    env, _ = env_with_task("reverse_string", limits=FAST)
    obs, reward, _, _, info = env.step("while True:\n    pass\n")
    assert reward == 0.0 and info["sandbox_status"] == "timeout" and not info["action_is_valid"]
    assert obs.startswith("Your code timed out after 1.5s while loading.")
    obs, reward, _, _, info = env.step("import os\nos._exit(3)\n")
    assert reward == 0.0 and "ended the process before any test ran" in obs


def test_feedback_is_sanitised_and_capped():
    env, _ = env_with_task("reverse_string")
    obs, _, _, _, _ = env.step("def reverse_string(s):\n    return '\\u00e9\\n' * 500\n")
    assert obs in env.observation_space
    first = obs.split("\n")[0]
    assert "?" in first and len(first) < 400


# ---------------------------------------------------------------- construction, determinism


@pytest.mark.parametrize("difficulty", [None, 1, 2, 3])
def test_determinism_and_spaces(difficulty):
    a, b = CodeTextEnv(difficulty=difficulty), CodeTextEnv(difficulty=difficulty)
    names = set()
    for seed in range(40):
        obs_a, info_a = a.reset(seed=seed)
        obs_b, _ = b.reset(seed=seed)
        assert obs_a == obs_b and a.task is b.task
        assert a.reset(seed=seed)[0] == obs_a
        assert obs_a in a.observation_space
        assert obs_a.endswith("\nReply with the complete Python function in <answer>...</answer>.")
        assert a.task.signature in obs_a and a.task.statement in obs_a
        assert info_a["instructions"] == a.instructions and info_a["attempt"] == 0
        if difficulty is not None:
            assert a.task.difficulty == difficulty
        names.add(a.task.name)
    assert len(names) >= 10
    assert a.task.reference in a.action_space  # code (newlines included) is a valid action


@pytest.mark.parametrize(
    "kwargs,name",
    [
        ({"difficulty": 0}, "difficulty"),
        ({"difficulty": 4}, "difficulty"),
        ({"difficulty": 2.0}, "difficulty"),
        ({"difficulty": True}, "difficulty"),
        ({"max_attempts": 0}, "max_attempts"),
        ({"max_attempts": "3"}, "max_attempts"),
        ({"decay": 0.0}, "decay"),
        ({"decay": 1.5}, "decay"),
        ({"decay": "0.5"}, "decay"),
        ({"render_mode": "human"}, "render_mode"),
        ({"limits": [1]}, "limits"),
        ({"limits": {"timeout": 2}}, "timeout"),
        ({"limits": {"timeout_s": 0}}, "timeout_s"),
        ({"limits": {"timeout_s": "2"}}, "timeout_s"),
        ({"limits": {"memory_mb": 10}}, "memory_mb"),
        ({"limits": {"max_processes": 2.5}}, "max_processes"),
    ],
)
def test_kwarg_validation(kwargs, name):
    with pytest.raises(ValueError) as excinfo:
        CodeTextEnv(**kwargs)
    msg = str(excinfo.value)
    assert name in msg
    if name in kwargs:
        assert repr(kwargs[name]) in msg
    if name == "timeout":
        assert all(k in msg for k in LIMIT_KEYS)  # says what is allowed


def test_limits_are_applied():
    env = CodeTextEnv(limits={"timeout_s": 2, "memory_mb": 256})
    assert env.sandbox_limits.wall_s == 2.0 and env.sandbox_limits.cpu_s == 2.0
    assert env.sandbox_limits.memory_mb == 256
    assert CodeTextEnv().sandbox_limits.wall_s == DEFAULT_LIMITS["timeout_s"]


@pytest.mark.parametrize("kwargs", [{}, {"difficulty": 3, "max_attempts": 1}])
def test_check_env_passes(kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(CodeTextEnv(**kwargs), skip_render_check=True)
        check_env(gymnasium.make(ENV_ID, **kwargs).unwrapped, skip_render_check=True)


def test_gymnasium_make_and_render():
    env = gymnasium.make(ENV_ID, difficulty=1, render_mode="ansi")
    assert isinstance(env.unwrapped, CodeTextEnv) and env.unwrapped.difficulty == 1
    obs, info = env.reset(seed=0)
    assert env.render() == obs and "Python" in info["instructions"]
    _, action = env.unwrapped.demonstration()
    _, reward, terminated, _, _ = env.step(action)
    assert reward == 1.0 and terminated
    assert CodeTextEnv().render() is None


def test_step_before_reset():
    with pytest.raises(RuntimeError):
        CodeTextEnv().step("def f(): pass")
    with pytest.raises(RuntimeError):
        CodeTextEnv().demonstration()
