"""The Countdown numbers puzzle: ``ragen2/Countdown-v0`` (the single-turn arithmetic target task
RAGEN and TinyZero train on).

Observation (example)::

    Numbers: 3, 5, 2. Target: 4.
    Write an equation that uses every number exactly once and equals the target.

The answer is an arithmetic expression over the given numbers with ``+ - * /`` and parentheses,
every number used exactly once (``2 + 5 - 3``; a trailing ``= 4`` is allowed). It is evaluated
exactly (:class:`fractions.Fraction`, no Python ``eval``: :func:`evaluate_equation` walks the
parsed tree and accepts nothing but numbers, the four operators, unary minus and parentheses).

With ``read="last"`` a free-text reply is read as a lenient grader reads it
(:func:`last_equation`): the longest arithmetic expression on the last line that holds one, left
of any ``=`` (``"3 + 5 = 8, then 8 - 2 = 6"`` on separate lines reads ``8 - 2``).

Rewards (TinyZero's scheme): 1 for an equation equal to the target (``success=True``);
``format_score`` (0.1) for a well-formed equation over exactly the given numbers whose value is
wrong; 0 otherwise, with ``action_is_valid=False`` (not an expression, other numbers, a division
by zero). One answer ends the episode (``max_attempts`` answers with retries).

Puzzles are generated per seed and solvable by construction: the target is the value of a random
expression over all the numbers (positive integer intermediate results only). :func:`solve`
brute-forces a solution (tests; up to 4 numbers).
"""

from __future__ import annotations

import ast
import itertools
import re
from fractions import Fraction
from typing import Any

import gymnasium as gym
from gymnasium import spaces

from .checks import ACTION_CHARSET, OBS_CHARSET, check_render_mode, is_int, is_real

__all__ = ["CountdownTextEnv", "evaluate_equation", "last_equation", "solve"]

_MAX_ACTION_LEN = 200
_OPS = ("+", "-", "*", "/")
_AST_OPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/"}
_EXPR = re.compile(r"[\d()+\-*/ ]*\d[\d()+\-*/ ]*")  # a run of digits, operators, parentheses


class EquationError(ValueError):
    """The answer is not an arithmetic expression over the puzzle's numbers."""


def _apply(op: str, a: Fraction, b: Fraction) -> Fraction:
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    if b == 0:
        raise EquationError("division by zero")
    return a / b


def evaluate_equation(text: str, numbers: list[int]) -> Fraction:
    """The exact value of ``text``, an expression using every one of ``numbers`` exactly once.

    Raises :class:`EquationError` naming what is wrong (syntax, a disallowed construct, the
    numbers used, a division by zero).
    """
    if not isinstance(text, str) or not text.strip():
        raise EquationError("empty answer")
    if len(text) > _MAX_ACTION_LEN:
        raise EquationError(f"longer than {_MAX_ACTION_LEN} characters")
    expr = text.strip().rstrip(".")
    if expr.count("=") > 1:
        raise EquationError("more than one '='")
    expr = expr.split("=")[0].strip()  # "2 + 5 - 3 = 4": the left side is the equation
    expr = expr.replace("×", "*").replace("÷", "/").replace("−", "-")
    try:
        tree = ast.parse(expr, mode="eval")
    except SyntaxError:
        raise EquationError(f"not an arithmetic expression: {expr[:40]!r}") from None
    used: list[int] = []

    def walk(node: ast.AST) -> Fraction:
        if isinstance(node, ast.BinOp) and type(node.op) in _AST_OPS:
            return _apply(_AST_OPS[type(node.op)], walk(node.left), walk(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -walk(node.operand)
        if isinstance(node, ast.Constant) and type(node.value) is int:
            used.append(node.value)
            return Fraction(node.value)
        raise EquationError(f"only numbers, + - * / and parentheses are allowed, not "
                            f"{type(node).__name__}")

    value = walk(tree.body)
    if sorted(used) != sorted(numbers):
        raise EquationError(f"uses {sorted(used)}; every number of {sorted(numbers)} exactly once")
    return value


def last_equation(text: str) -> str | None:
    """The equation a free-text reply ends on: on the last line that holds an arithmetic
    expression (digits with at least one operator), the longest such expression left of any ``=``
    (``×``, ``÷`` and ``−`` read as ``*``, ``/`` and ``-``); None when no line holds one.
    ``"2 + 5 = 7\n7 - 3 = 4"`` -> ``"7 - 3"``; ``"So 10 - 3 = 7."`` -> ``"10 - 3"``."""
    if not isinstance(text, str):
        return None
    for line in reversed(text.splitlines()):
        left = line.split("=")[0]
        left = left.replace("\u00d7", "*").replace("\u00f7", "/").replace("\u2212", "-")
        exprs = [e.strip() for e in _EXPR.findall(left)]
        exprs = [e for e in exprs if any(op in e for op in _OPS)]
        if exprs:
            return max(exprs, key=len)
    return None


def solve(numbers: list[int], target: int) -> str | None:
    """An expression over all ``numbers`` equal to ``target`` (brute force), or None."""
    def exprs(items: tuple[tuple[Fraction, str], ...]):
        if len(items) == 1:
            yield items[0]
            return
        for i, j in itertools.permutations(range(len(items)), 2):
            rest = tuple(x for k, x in enumerate(items) if k not in (i, j))
            (a, ta), (b, tb) = items[i], items[j]
            for op in _OPS:
                if op == "/" and b == 0:
                    continue
                yield from exprs(rest + ((_apply(op, a, b), f"({ta} {op} {tb})"),))

    for value, text in exprs(tuple((Fraction(n), str(n)) for n in numbers)):
        if value == target:
            return text[1:-1] if text.startswith("(") and len(numbers) > 1 else text
    return None


class CountdownTextEnv(gym.Env):
    """Reach a target number with an equation over the given numbers.

    Args:
        num_count: how many numbers, 2..5 (RAGEN / TinyZero: 3 or 4).
        max_number: numbers are drawn from 1..max_number (>= 2).
        format_score: reward of a well-formed but wrong equation, in [0, 1).
        max_attempts: answers per episode (>= 1; 1 = single turn, as RAGEN runs it).
        read: ``"equation"`` (default) the answer is the equation; ``"last"`` the equation a
            free-text reply ends on (:func:`last_equation`).
        render_mode: None or ``"ansi"``.
    """

    metadata = {"render_modes": ["ansi"], "render_fps": 4}

    def __init__(self, num_count: int = 3, max_number: int = 20, format_score: float = 0.1,
                 max_attempts: int = 1, render_mode: str | None = None,
                 read: str = "equation") -> None:
        if not is_int(num_count) or not 2 <= num_count <= 5:
            raise ValueError(f"num_count must be an int in 2..5, got {num_count!r}")
        if not is_int(max_number) or max_number < 2:
            raise ValueError(f"max_number must be an int >= 2, got {max_number!r}")
        if not is_real(format_score) or not 0.0 <= format_score < 1.0:
            raise ValueError(f"format_score must be a number in [0, 1), got {format_score!r}")
        if not is_int(max_attempts) or max_attempts < 1:
            raise ValueError(f"max_attempts must be an int >= 1, got {max_attempts!r}")
        if read not in ("equation", "last"):
            raise ValueError(f"read must be 'equation' or 'last', got {read!r}")
        check_render_mode(render_mode, self.metadata["render_modes"])
        self.num_count, self.max_number = int(num_count), int(max_number)
        self.format_score, self.max_attempts = float(format_score), int(max_attempts)
        self.render_mode, self.read = render_mode, read
        self.observation_space = spaces.Text(max_length=400, min_length=1, charset=OBS_CHARSET)
        self.action_space = spaces.Text(max_length=_MAX_ACTION_LEN, min_length=0,
                                        charset=ACTION_CHARSET)
        self.instructions = (
            "You are solving the Countdown puzzle: combine the given numbers with +, -, * and / "
            "(and parentheses) into an equation equal to the target, using every number exactly "
            "once. Answer with the equation only, e.g. 2 + 5 - 3. A correct equation gives reward 1, "
            f"a well-formed wrong one {self.format_score:g}.")
        self.numbers: list[int] = []
        self.target: int | None = None
        self._solution = self._reasoning = ""
        self._attempt, self._terminated, self._success = 0, False, False
        self._last_obs = ""

    # ------------------------------------------------------------------ puzzles
    def _generate(self) -> None:
        """Numbers, and a target reached by a random expression over all of them (positive
        integer intermediate values), with its worked steps as the expert's reasoning."""
        rng = self.np_random
        while True:
            nums = [int(rng.integers(1, self.max_number + 1)) for _ in range(self.num_count)]
            items = [(Fraction(n), str(n)) for n in nums]
            steps = []
            while len(items) > 1:
                i, j = (int(k) for k in rng.choice(len(items), size=2, replace=False))
                (a, ta), (b, tb) = items[i], items[j]
                op = _OPS[int(rng.integers(3))]  # + - *: integer results
                if op == "-" and a < b:
                    (a, ta), (b, tb) = (b, tb), (a, ta)
                value = _apply(op, a, b)
                steps.append(f"{a} {op} {b} = {value}")
                rest = [x for k, x in enumerate(items) if k not in (i, j)]
                items = rest + [(value, f"({ta} {op} {tb})")]
            value, text = items[0]
            if value > 0:
                break
        self.numbers, self.target = nums, int(value)
        self._solution = text[1:-1] if text.startswith("(") else text
        self._reasoning = f"{'. '.join(steps)}. So {self._solution} = {self.target}."

    def _problem_text(self) -> str:
        return (f"Numbers: {', '.join(map(str, self.numbers))}. Target: {self.target}.\n"
                "Write an equation that uses every number exactly once and equals the target.")

    # ------------------------------------------------------------------ gym API
    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        self._generate()
        self._attempt, self._terminated, self._success = 0, False, False
        self._last_obs = self._problem_text()
        return self._last_obs, {"instructions": self.instructions, **self._info(True)}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self.target is None:
            raise RuntimeError("CountdownTextEnv.step() called before reset()")
        if self._terminated:
            return self._last_obs, 0.0, True, False, self._info(True)
        self._attempt += 1
        try:
            equation = action if self.read == "equation" else last_equation(action)
            if equation is None:
                raise EquationError("no arithmetic expression found")
            value = evaluate_equation(equation, self.numbers)
        except EquationError as e:
            valid, reward, head = False, 0.0, f"Invalid equation: {e}."
        else:
            valid = True
            if value == self.target:
                self._success, reward, head = True, 1.0, f"Correct! {value} = {self.target}."
            else:
                shown = str(value.numerator) if value.denominator == 1 else f"{value}"
                reward, head = self.format_score, f"Incorrect: it equals {shown}, not {self.target}."
        left = self.max_attempts - self._attempt
        self._terminated = self._success or left <= 0
        tail = "" if self._terminated else f" Attempts left: {left}."
        self._last_obs = f"{head}{tail}\n{self._problem_text()}"
        return self._last_obs, float(reward), self._terminated, False, self._info(valid)

    def _info(self, valid: bool) -> dict[str, Any]:
        return {"success": bool(self._success), "action_is_valid": bool(valid),
                "attempt": self._attempt}

    def render(self) -> str | None:
        return self._last_obs if self.render_mode == "ansi" and self.target is not None else None

    # ------------------------------------------------------------------ problem identity
    def problem_key(self) -> str:
        """The current puzzle (after ``reset``) as ``countdown:<sorted numbers>-><target>``,
        e.g. ``countdown:2,3,5->4`` (the order the numbers are shown in does not matter)."""
        if self.target is None:
            raise RuntimeError("problem_key() called before reset()")
        return f"countdown:{','.join(map(str, sorted(self.numbers)))}->{self.target}"

    def problem_keys(self) -> None:
        """Not enumerated (the targets follow from random expressions): None."""
        return None

    # ------------------------------------------------------------------ expert hook
    def demonstration(self) -> tuple[str, str]:
        """(reasoning, action): the generating expression's steps and the expression."""
        if self.target is None:
            raise RuntimeError("demonstration() called before reset()")
        if self._terminated:
            raise RuntimeError("demonstration() called after the episode ended")
        return self._reasoning, self._solution
