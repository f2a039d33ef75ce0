"""Text arithmetic / word problems: ``ragen2/Math-v0``.

The agent reads one problem and answers with a number; it may try again up to ``max_attempts``
times. Problems are generated per seed (``difficulty`` 1..3) or drawn per seed from a GSM8K-style
JSONL file (``dataset_path``).

Observation (difficulty 1, example)::

    What is 17 + 25?
    Answer with the number only.

After a wrong answer the observation is ``Incorrect, try again. Attempts left: N.`` followed by
the problem (an answer without a readable number starts with ``No number found in your answer.``
instead of ``Incorrect``). With ``feedback="direction"`` it also says which way the answer is
off, so a retry has something to go on: ``Incorrect: 18 is too high, try again. Attempts left:
N.`` (the number as read, ``too low`` below the answer). The final observation is
``Correct! The answer is X.`` or ``Incorrect. No attempts left.`` followed by the problem.

Rewards: a correct answer on attempt ``k`` gives ``decay ** (k - 1)`` and terminates with
``success=True``; everything else gives 0. After ``max_attempts`` wrong (or unreadable) answers
the episode terminates with ``success=False``. It is never truncated. Stepping after the end is a
no-op with reward 0.

Answer checking (:func:`parse_number`, :func:`answers_match`) is exact, with
:class:`fractions.Fraction`. An answer is read as *exactly one* number, optionally surrounded by
words: integers, signs (``-5``, ``+5``, ``−5``), decimals (``0.50`` == ``.5``), fractions
(``3/4``), mixed numbers (``1 1/2``), thousands separators in groups of three (``1,234``), a
leading ``$`` (``$7``, ``-$7``) and trailing units or words (``42 apples``, ``7 dollars``, ``42.``).
``%`` is always just a unit: ``12%`` reads as 12, never 0.12 (the expected answers here are given in
the problem's own units, so "what percent" questions expect the number of percent). Text with no
number, or with two or more numbers (``3 or 4``, ``5-3``, ``12,5``), is unreadable: ``None``.
"""

from __future__ import annotations

import json
import os
import re
from fractions import Fraction
from numbers import Rational, Real
from pathlib import Path
from typing import Any

import gymnasium as gym
from .checks import ACTION_CHARSET, OBS_CHARSET, check_render_mode, is_int, is_real
import numpy as np
from gymnasium import spaces

__all__ = ["MathTextEnv", "parse_number", "last_number", "answers_match", "load_dataset",
           "SAMPLE_DATASET"]

#: the shipped 8-problem GSM8K-style sample (self-written problems)
SAMPLE_DATASET: Path = Path(__file__).parent / "data" / "gsm8k_sample.jsonl"

ANSWER_LINE = "Answer with the number only."
_MAX_ACTION_LEN = 256

# One number token; alternatives are tried in order (mixed number before fraction before the rest).
_NUMBER_RE = re.compile(
    r"(?P<sign>[-+\u2212])?\$?"
    r"(?P<num>"
    r"(?P<whole>\d+)\s+(?P<mnum>\d+)\s*/\s*(?P<mden>\d+)"  # mixed number 1 1/2
    r"|(?P<fnum>\d+)\s*/\s*(?P<fden>\d+)"  # fraction 3/4
    r"|\d{1,3}(?:,\d{3})+(?:\.\d+)?"  # thousands separators 1,234.5
    r"|\d*\.\d+"  # decimal 0.5 / .5
    r"|\d+"  # integer
    r")"
)


def parse_number(text: Any) -> Fraction | None:
    """The single number written in ``text`` as an exact Fraction, or None (see module doc)."""
    if not isinstance(text, str):
        return None
    matches = list(_NUMBER_RE.finditer(text))
    if len(matches) != 1:
        return None
    m = matches[0]
    if m.group("whole") is not None:
        den = int(m.group("mden"))
        if den == 0:
            return None
        value = int(m.group("whole")) + Fraction(int(m.group("mnum")), den)
    elif m.group("fnum") is not None:
        den = int(m.group("fden"))
        if den == 0:
            return None
        value = Fraction(int(m.group("fnum")), den)
    else:
        value = Fraction(m.group("num").replace(",", ""))
    return -value if m.group("sign") in ("-", "\u2212") else value


def last_number(text: Any) -> Fraction | None:
    """The last number written in ``text`` (each read as :func:`parse_number` reads one), or None.
    ``7 - 5 = 2`` reads 2; ``2 + 9 = 18. The answer is 18.`` reads 18."""
    if not isinstance(text, str):
        return None
    matches = list(_NUMBER_RE.finditer(text))
    return parse_number(matches[-1].group(0)) if matches else None


def _to_fraction(value: Any) -> Fraction:
    if isinstance(value, bool):
        raise ValueError(f"expected answer must be a number or number text, got {value!r}")
    if isinstance(value, (Rational, np.integer)):
        return Fraction(int(value)) if isinstance(value, np.integer) else Fraction(value)
    if isinstance(value, Real):
        return Fraction(str(float(value)))  # 0.1 -> 1/10, not the binary float
    parsed = parse_number(value)
    if parsed is None:
        raise ValueError(f"expected answer must be a number or number text, got {value!r}")
    return parsed


def answers_match(given: Any, expected: Any) -> bool:
    """Whether answer text ``given`` equals ``expected`` (number, Fraction or number text) exactly."""
    value = parse_number(given)
    return value is not None and value == _to_fraction(expected)


def _fmt_decimal(x: Fraction) -> str:
    """Exact decimal text of a Fraction whose denominator has only factors 2 and 5."""
    if x.denominator == 1:
        return str(x.numerator)
    sign = "-" if x < 0 else ""
    x = abs(x)
    k = 1
    while (x * 10**k).denominator != 1:
        k += 1
        if k > 30:
            raise ValueError(f"{x} has no short exact decimal")
    digits = str(int(x * 10**k)).rjust(k + 1, "0")
    return f"{sign}{digits[:-k]}.{digits[-k:]}"


def _fmt_fraction(x: Fraction) -> str:
    return str(x.numerator) if x.denominator == 1 else f"{x.numerator}/{x.denominator}"


def _fmt_money(x: Fraction) -> str:
    cents = x * 100
    if cents.denominator != 1:
        raise ValueError(f"{x} is not a whole number of cents")
    return f"{int(cents) // 100}.{int(cents) % 100:02d}" if x >= 0 else "-" + _fmt_money(-x)


_CALC_RE = re.compile(r"<<[^<>]*>>")


def load_dataset(path: str | os.PathLike) -> list[tuple[str, str, str]]:
    """Read a GSM8K-style JSONL file into (question, solution reasoning, answer text) triples.

    Every non-blank line must be a JSON object with string fields ``question`` and ``answer``,
    where the answer's last line is ``#### <number>``. Calculator annotations ``<<...>>`` are
    dropped from the reasoning. Raises ValueError naming the file and the 1-based line number.
    """
    path = Path(path)
    rule = (
        "each line must be a JSON object with string fields 'question' and 'answer', "
        "the answer ending with '#### <number>'"
    )
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"dataset_path {str(path)!r} cannot be read as UTF-8 text: {exc}") from exc
    problems = []
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"dataset_path {str(path)!r} line {lineno}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{where}: invalid JSON ({exc.msg}); {rule}") from None
        if not isinstance(row, dict):
            raise ValueError(f"{where}: not a JSON object; {rule}")
        question, answer = row.get("question"), row.get("answer")
        if not isinstance(question, str) or not question.strip():
            raise ValueError(f"{where}: missing or empty 'question'; {rule}")
        if not isinstance(answer, str):
            raise ValueError(f"{where}: missing 'answer'; {rule}")
        solution, sep, final = answer.rpartition("####")
        final = final.strip()
        if not sep or "\n" in final or parse_number(final) is None:
            raise ValueError(f"{where}: the answer does not end with '#### <number>'; {rule}")
        reasoning = " ".join(_CALC_RE.sub("", solution).split())
        problems.append((question.strip(), reasoning, final))
    if not problems:
        raise ValueError(f"dataset_path {str(path)!r} has no problems; {rule}")
    return problems


def _sum_text(a: int, op: str, b: int) -> str:
    """A difficulty-1 problem: ``What is a + b?``."""
    return f"What is {a} {op} {b}?"


def _product_text(a: int, b: int, c: int, op: str, product_first: bool) -> str:
    """A difficulty-2 problem: ``What is a * b + c?`` or ``What is a + b * c?``."""
    return f"What is {a} * {b} {op} {c}?" if product_first else f"What is {a} {op} {b} * {c}?"


_NAMES = ("Ana", "Ben", "Chloe", "Dev", "Elena", "Farid", "Grace", "Hiro", "Ines", "Jonah")


class MathTextEnv(gym.Env):
    """Math problems with text observations and free-text numeric answers.

    Args:
        difficulty: 1 = ``a + b`` / ``a - b`` with a, b in 1..``max_operand``; 2 = three
            operands with one ``*`` and one ``+`` or ``-`` (usual precedence); 3 = short word
            problems with one or two steps whose answers may be decimals (money, sharing) or
            fractions. Ignored when ``dataset_path`` is given.
        max_operand: the largest operand at difficulty 1, an int in 1..99 (default 99; 9 gives
            one-digit problems, a start a small pretrained model can solve some of).
        read: how an answer is read: ``"only"`` (default) exactly one number (:func:`parse_number`);
            ``"last"`` the last number written, as a lenient grader reads a worked reply such as
            ``7 - 5 = 2`` (:func:`last_number`).
        max_attempts: answers allowed per episode, an int >= 1.
        feedback: what a wrong answer with retries left is told: ``"retry"`` (default) that it is
            incorrect; ``"direction"`` also the number read and whether it is too high or too low
            (the instructions then say so).
        decay: reward multiplier per extra attempt, in (0, 1]; attempt k earns ``decay ** (k-1)``.
        dataset_path: optional GSM8K-style JSONL (see :func:`load_dataset`); when given, each
            ``reset`` draws one problem from it with ``self.np_random``. The shipped sample is
            :data:`SAMPLE_DATASET`.
        render_mode: None or ``"ansi"`` (``render()`` then returns the observation text).
    """

    metadata = {"render_modes": ["ansi"], "render_fps": 4}

    def __init__(
        self,
        difficulty: int = 1,
        max_attempts: int = 3,
        decay: float = 0.5,
        dataset_path: str | os.PathLike | None = None,
        render_mode: str | None = None,
        max_operand: int = 99,
        read: str = "only",
        feedback: str = "retry",
    ) -> None:
        if not is_int(difficulty) or not 1 <= difficulty <= 3:
            raise ValueError(f"difficulty must be an int in 1..3, got {difficulty!r}")
        if not is_int(max_operand) or not 1 <= max_operand <= 99:
            raise ValueError(f"max_operand must be an int in 1..99, got {max_operand!r}")
        if read not in ("only", "last"):
            raise ValueError(f"read must be 'only' or 'last', got {read!r}")
        if not is_int(max_attempts) or max_attempts < 1:
            raise ValueError(f"max_attempts must be an int >= 1, got {max_attempts!r}")
        if feedback not in ("retry", "direction"):
            raise ValueError(f"feedback must be 'retry' or 'direction', got {feedback!r}")
        if not is_real(decay) or not 0.0 < decay <= 1.0:
            raise ValueError(f"decay must be a number in (0, 1], got {decay!r}")
        if dataset_path is not None and not isinstance(dataset_path, (str, os.PathLike)):
            raise ValueError(f"dataset_path must be None or a file path, got {dataset_path!r}")
        if dataset_path is not None and not Path(dataset_path).is_file():
            raise ValueError(f"dataset_path must be an existing JSONL file, got {dataset_path!r}")
        check_render_mode(render_mode, self.metadata["render_modes"])

        self.difficulty = int(difficulty)
        self.max_operand = int(max_operand)
        self.read = read
        self.max_attempts = int(max_attempts)
        self.feedback = feedback
        self.decay = float(decay)
        self.dataset_path = None if dataset_path is None else str(dataset_path)
        self.render_mode = render_mode
        self._dataset = None if dataset_path is None else load_dataset(dataset_path)

        charset, longest = OBS_CHARSET, 400
        if self._dataset is not None:
            extra = {ch for q, _, a in self._dataset for ch in q + a} - set(OBS_CHARSET)
            charset += "".join(sorted(extra))
            longest = max(longest, max(len(q) + len(a) for q, _, a in self._dataset))
        self.observation_space = spaces.Text(max_length=longest + 256, min_length=1, charset=charset)
        self.action_space = spaces.Text(max_length=_MAX_ACTION_LEN, min_length=0, charset=ACTION_CHARSET)
        self.instructions: str = (
            "Solve the math problem and reply with the final answer as a number only: an integer, "
            "a decimal such as 2.5, or a fraction such as 3/4.\n"
            f"You have {self.max_attempts} attempt(s). A correct answer on attempt k gives reward "
            f"{self.decay:g}^(k-1); a wrong answer gives 0 and, while attempts remain, a retry."
        )
        if self.feedback == "direction" and self.max_attempts > 1:
            self.instructions += " After a wrong answer you are told if it was too high or too low."

        # State, set by reset().
        self._problem: str | None = None
        self._reasoning = ""
        self._answer_text = ""
        self._answer: Fraction | None = None
        self._attempt = 0
        self._terminated = False
        self._success = False
        self._last_obs = ""

    # ------------------------------------------------------------------ problems
    def _rand(self, low: int, high: int) -> int:
        """Uniform int in [low, high] from ``self.np_random``."""
        return int(self.np_random.integers(low, high + 1))

    def _generate(self) -> tuple[str, str, str]:
        """(problem, reasoning, answer text) for ``self.difficulty``, drawn from ``self.np_random``."""
        if self.difficulty == 1:
            a, b = self._rand(1, self.max_operand), self._rand(1, self.max_operand)
            op = "+" if self._rand(0, 1) == 0 else "-"
            ans = a + b if op == "+" else a - b
            return _sum_text(a, op, b), f"{a} {op} {b} = {ans}.", str(ans)
        if self.difficulty == 2:
            a, b, c = self._rand(2, 20), self._rand(2, 20), self._rand(2, 20)
            op = "+" if self._rand(0, 1) == 0 else "-"
            if self._rand(0, 1) == 0:  # a * b op c
                ab = a * b
                ans = ab + c if op == "+" else ab - c
                reasoning = f"{a} * {b} = {ab}. {ab} {op} {c} = {ans}."
                return _product_text(a, b, c, op, True), reasoning, str(ans)
            bc = b * c  # a op b * c
            ans = a + bc if op == "+" else a - bc
            reasoning = f"{b} * {c} = {bc}. {a} {op} {bc} = {ans}."
            return _product_text(a, b, c, op, False), reasoning, str(ans)
        return self._word_problem()

    def _word_problem(self) -> tuple[str, str, str]:
        name = _NAMES[self._rand(0, len(_NAMES) - 1)]
        kind = self._rand(0, 4)
        if kind == 0:
            trays, per = self._rand(3, 9), self._rand(4, 12)
            total = trays * per
            sold = self._rand(1, total - 1)
            ans = total - sold
            return (
                f"{name} bakes {trays} trays of {per} muffins each and sells {sold} muffins. "
                "How many muffins are left?",
                f"{trays} * {per} = {total} muffins. {total} - {sold} = {ans}.",
                str(ans),
            )
        if kind == 1:
            count, price = self._rand(2, 6), Fraction(self._rand(5, 20), 4)
            cost = count * price
            bill = 20 if cost <= 20 else 50
            change = bill - cost
            return (
                f"{name} buys {count} notebooks at ${_fmt_money(price)} each and pays with a "
                f"${bill} bill. How much change does {name} get, in dollars?",
                f"{count} * {_fmt_money(price)} = {_fmt_money(cost)}. "
                f"{bill} - {_fmt_money(cost)} = {_fmt_money(change)}.",
                _fmt_money(change),
            )
        if kind == 2:
            slices = (6, 8, 10, 12)[self._rand(0, 3)]
            a = self._rand(1, slices - 2)
            b = self._rand(1, slices - 1 - a)
            left = slices - a - b
            ans = _fmt_fraction(Fraction(left, slices))
            return (
                f"A pizza is cut into {slices} equal slices. {name} eats {a} slices and a friend "
                f"eats {b} slices. What fraction of the pizza is left?",
                f"{a} + {b} = {a + b} slices eaten. {slices} - {a + b} = {left} slices left. "
                f"{left}/{slices} = {ans}.",
                ans,
            )
        if kind == 3:
            friends, liters = (2, 4, 5, 8)[self._rand(0, 3)], self._rand(3, 30)
            ans = _fmt_decimal(Fraction(liters, friends))
            return (
                f"{name} and friends, {friends} people in all, share {liters} liters of juice "
                "equally. How many liters does each person get?",
                f"{liters} / {friends} = {ans}.",
                ans,
            )
        speed, hours, extra = 5 * self._rand(6, 18), self._rand(2, 5), self._rand(5, 40)
        part = speed * hours
        return (
            f"{name} drives at {speed} km per hour for {hours} hours, then drives {extra} km more. "
            f"How many km does {name} drive in total?",
            f"{speed} * {hours} = {part} km. {part} + {extra} = {part + extra} km.",
            str(part + extra),
        )

    # ------------------------------------------------------------------ text
    def _problem_text(self) -> str:
        return f"{self._problem}\n{ANSWER_LINE}"

    # ------------------------------------------------------------------ gym API
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        if self._dataset is not None:
            idx = int(self.np_random.integers(len(self._dataset)))
            self._problem, self._reasoning, self._answer_text = self._dataset[idx]
        else:
            self._problem, self._reasoning, self._answer_text = self._generate()
        self._answer = parse_number(self._answer_text)
        assert self._answer is not None, self._answer_text
        self._attempt = 0
        self._terminated = False
        self._success = False
        self._last_obs = self._problem_text()
        info = {"instructions": self.instructions, **self._info(True)}
        return self._last_obs, info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self._problem is None:
            raise RuntimeError("MathTextEnv.step() called before reset()")
        value = parse_number(action) if self.read == "only" else last_number(action)
        valid = value is not None
        if self._terminated:
            return self._last_obs, 0.0, True, False, self._info(valid)

        self._attempt += 1
        reward = 0.0
        left = self.max_attempts - self._attempt
        if valid and value == self._answer:
            self._terminated = self._success = True
            reward = self.decay ** (self._attempt - 1)
            head = f"Correct! The answer is {self._answer_text}."
        elif left <= 0:
            self._terminated = True
            head = "Incorrect. No attempts left."
        elif valid and self.feedback == "direction":
            side = "high" if value > self._answer else "low"
            head = (f"Incorrect: {_fmt_fraction(value)} is too {side}, try again. "
                    f"Attempts left: {left}.")
        else:
            head = "Incorrect" if valid else "No number found in your answer"
            head += f", try again. Attempts left: {left}."
        self._last_obs = f"{head}\n{self._problem_text()}"
        return self._last_obs, float(reward), self._terminated, False, self._info(valid)

    def _info(self, valid: bool) -> dict[str, Any]:
        return {
            "success": bool(self._success),
            "action_is_valid": bool(valid),
            "attempt": self._attempt,  # answers given so far this episode
            "attempts_left": self.max_attempts - self._attempt,
        }

    def render(self) -> str | None:
        if self.render_mode == "ansi" and self._problem is not None:
            return self._last_obs
        return None

    # ------------------------------------------------------------------ expert hook
    def demonstration(self) -> tuple[str, str]:
        """(reasoning, action): the worked arithmetic of the problem and the exact answer text."""
        if self._problem is None:
            raise RuntimeError("demonstration() called before reset()")
        if self._terminated:
            raise RuntimeError("demonstration() called after the episode ended")
        reasoning = self._reasoning or f"The answer is {self._answer_text}."
        return reasoning, self._answer_text

    # ------------------------------------------------------------------ problem identity
    def problem_key(self) -> str:
        """The current problem (after ``reset``) as ``math:<problem text>``, e.g.
        ``math:What is 3 + 4?``: the operands and operators, or the dataset question. The same
        problem has the same key under any kwargs (a trainer can hold it out of training)."""
        if self._problem is None:
            raise RuntimeError("problem_key() called before reset()")
        return f"math:{self._problem}"

    def problem_keys(self) -> list[str] | None:
        """Every problem key ``reset`` can produce under these kwargs, each once (the dataset's
        questions; difficulty 1: ``2 * max_operand**2`` sums and differences; difficulty 2:
        ``19**3 * 4`` expressions), or None at difficulty 3 (not enumerated). Each key is drawn
        with equal probability (dataset: up to repeated questions)."""
        if self._dataset is not None:
            return sorted({f"math:{q}" for q, _, _ in self._dataset})
        ops = ("+", "-")
        if self.difficulty == 1:
            r = range(1, self.max_operand + 1)
            return [f"math:{_sum_text(a, op, b)}" for a in r for b in r for op in ops]
        if self.difficulty == 2:
            r = range(2, 21)
            return [f"math:{_product_text(a, b, c, op, first)}"
                    for a in r for b in r for c in r for op in ops for first in (True, False)]
        return None

    # ------------------------------------------------------------------ read-only state
    @property
    def problem(self) -> str | None:
        """Current problem text (without the answer line), None before reset."""
        return self._problem

    @property
    def answer(self) -> Fraction | None:
        """Exact expected answer, None before reset."""
        return self._answer
