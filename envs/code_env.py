"""Python function writing: ``ragen2/Code-v0``.

Each episode is one task from :data:`ragen2_envs.code_tasks.TASKS` (42 self-written tasks, 14 per
``difficulty`` level 1..3; ``difficulty=None`` draws from all of them), picked by the reset seed.
The agent replies with Python source defining the function; it may try again up to
``max_attempts`` times.

Observation (example)::

    Write the Python function

    def clamp(x: int, lo: int, hi: int) -> int

    Return x limited to the range from lo to hi: ... Example: clamp(15, 0, 10) returns 10.
    Reply with the complete Python function in <answer>...</answer>.

The action is the source text (what the rollout takes from ``<answer>``), optionally inside a
```` ``` ```` or ```` ```python ```` fence with text around it (see :func:`extract_code`). It runs
in :mod:`ragen2_envs.sandbox` against the task's hidden tests: the untrusted process only calls
the function and reports the returned values; this process compares them with the expected values
(which the code never sees). Hostile or broken code never raises out of ``step``: it fails tests.

After an attempt that does not pass everything, the observation starts with what went wrong, e.g.
``Passed 3/6 tests. Failed: clamp(-5, 0, 10) returned -5, expected 0; clamp(15, 0, 10) raised
ValueError: bad``, (at most two failures, each capped), or ``Your code could not be loaded:
SyntaxError: ...``, ``... timed out after 3s``, then ``Attempts left: N.`` (or ``No attempts
left.``) and the task again. A full pass gives ``All N tests passed.`` and the task.

Rewards: attempt k scores ``decay ** (k - 1) * passed / total``. The step reward is how much that
improves on the best score of the earlier attempts (0 if it does not), so an episode's return is
its best score: at most 1, and a full pass at once is always worth the most (a plain sum of
per-attempt partial credit would pay for a deliberately partial first answer followed by the
fix). All tests passed terminates with ``success=True``; ``max_attempts`` attempts without that
terminate with ``success=False``. It is never truncated; stepping after the end is a no-op with
reward 0.

info: ``success``, ``tests_passed``, ``tests_total``, ``sandbox_status`` (a
:data:`~ragen2_envs.sandbox.STATUSES` value, or ``"no_code"``), ``action_is_valid`` (False when no
code could be extracted or it does not define the function: syntax error, exception at load,
missing name), ``attempt``, ``attempts_left``, ``score`` and ``task``.

A sandbox that cannot be set up at all (an infrastructure fault, not the agent's) raises
RuntimeError rather than paying 0 for possibly correct code.
"""

from __future__ import annotations

import re
from typing import Any

import gymnasium as gym
from gymnasium import spaces

from .checks import (
    ACTION_CHARSET,
    ECHO_CHARSET,
    OBS_CHARSET,
    check_render_mode,
    is_int,
    is_real,
)
from .code_tasks import CodeTask, tasks_for
from .sandbox import SandboxLimits, SandboxResult, run_python, values_match

__all__ = ["DEFAULT_LIMITS", "LIMIT_KEYS", "CodeTextEnv", "extract_code"]

ANSWER_LINE = "Reply with the complete Python function in <answer>...</answer>."
_MAX_ACTION_LEN = 8192
_MAX_FAILURE_CHARS = 160

#: the env's default sandbox limits (``limits`` kwarg keys -> values)
DEFAULT_LIMITS: dict[str, float | int] = {
    "timeout_s": 3.0,
    "cpu_s": 3.0,
    "memory_mb": 512,
    "max_processes": 16,
    "max_file_mb": 16,
    "max_output_bytes": 64_000,
}
LIMIT_KEYS = tuple(DEFAULT_LIMITS)
_LIMIT_FIELDS = {"timeout_s": "wall_s"}

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+.-]*)[^\n]*\n(.*?)(?:^[ \t]*```|\Z)", re.DOTALL | re.MULTILINE)
_ANSWER = re.compile(r"<answer>(.*?)(?:</answer>|\Z)", re.DOTALL)
_CODE_LINE = re.compile(
    r"(?:def |async def |class |import |from \S+ import |@|#|if |for |while |try:|with |"
    r"[A-Za-z_][\w.]*\s*(?:=|\())"
)
_DEF_LINE = re.compile(r"(?:def |async def |class |import |from \S+ import |@)")


def extract_code(text: str, function: str | None = None) -> str:
    """The Python source in an answer: the inside of ``<answer>`` if present, then the fenced
    block that defines ``function`` (else the first fenced block; an unclosed fence runs to the
    end), else the text itself with leading prose lines (before the first ``def``/``import``/...)
    dropped. Returns "" when there is nothing."""
    if not isinstance(text, str):
        return ""
    text = text.replace("\r\n", "\n")
    m = _ANSWER.search(text)
    if m:
        text = m.group(1)
    blocks = [b.group(2) for b in _FENCE.finditer(text)]
    if blocks:
        pick = blocks[0]
        if function:
            defines = re.compile(rf"^\s*(?:async\s+)?def\s+{re.escape(function)}\s*\(|^\s*{re.escape(function)}\s*=",
                                 re.MULTILINE)
            pick = next((b for b in blocks if defines.search(b)), pick)
        return pick.strip("\n") if pick.strip() else ""
    lines = text.strip("\n").split("\n")
    first = next((ln for ln in lines if ln.strip()), "")
    if first and not _CODE_LINE.match(first):  # prose first: start at the first code line
        start = next((i for i, ln in enumerate(lines) if _DEF_LINE.match(ln)), None)
        if start is not None:
            lines = lines[start:]
    code = "\n".join(lines).strip("\n")
    return code if code.strip() else ""


def _sanitize(text: str, limit: int) -> str:
    text = "".join(ch if ch in ECHO_CHARSET else "?" for ch in str(text).replace("\n", " "))
    return text if len(text) <= limit else text[: limit - 3] + "..."


class CodeTextEnv(gym.Env):
    """Write a Python function that passes hidden tests, run in a sandbox.

    Args:
        difficulty: 1 (one-liners), 2 (loops and dicts), 3 (algorithms), or None for all levels.
        max_attempts: answers allowed per episode, an int >= 1.
        decay: score multiplier per extra attempt, in (0, 1]; attempt k scores
            ``decay ** (k-1) * passed / total``.
        limits: overrides of the sandbox limits, a dict with keys among :data:`LIMIT_KEYS`
            (``timeout_s``: wall clock per attempt; ``cpu_s``; ``memory_mb``; ``max_processes``;
            ``max_file_mb``; ``max_output_bytes``); defaults :data:`DEFAULT_LIMITS`.
        render_mode: None or ``"ansi"`` (``render()`` then returns the observation text).
    """

    metadata = {"render_modes": ["ansi"], "render_fps": 4}

    def __init__(
        self,
        difficulty: int | None = None,
        max_attempts: int = 3,
        decay: float = 0.5,
        limits: dict[str, Any] | None = None,
        render_mode: str | None = None,
    ) -> None:
        if difficulty is not None and (not is_int(difficulty) or not 1 <= difficulty <= 3):
            raise ValueError(f"difficulty must be None or an int in 1..3, got {difficulty!r}")
        if not is_int(max_attempts) or max_attempts < 1:
            raise ValueError(f"max_attempts must be an int >= 1, got {max_attempts!r}")
        if not is_real(decay) or not 0.0 < decay <= 1.0:
            raise ValueError(f"decay must be a number in (0, 1], got {decay!r}")
        check_render_mode(render_mode, self.metadata["render_modes"])
        self.sandbox_limits = self._make_limits(limits)

        self.difficulty = None if difficulty is None else int(difficulty)
        self.max_attempts = int(max_attempts)
        self.decay = float(decay)
        self.render_mode = render_mode
        self.tasks: tuple[CodeTask, ...] = tasks_for(self.difficulty)

        longest = max(len(self._task_text(t)) for t in self.tasks)
        self.observation_space = spaces.Text(max_length=longest + 512, min_length=1, charset=OBS_CHARSET)
        self.action_space = spaces.Text(
            max_length=_MAX_ACTION_LEN, min_length=0, charset=ACTION_CHARSET + "\n\t"
        )
        self.instructions: str = (
            "Write the Python function the task asks for. Reply with its complete source code "
            "(a ```python fence is optional); helper functions and standard-library imports are "
            "allowed, no input() or printing is needed. It is run on hidden tests in a sandbox "
            f"(time limit {self.sandbox_limits.wall_s:g}s, no network, no files outside a "
            "scratch directory). "
            f"You have {self.max_attempts} attempt(s); after a failed attempt you see which tests "
            f"failed. Attempt k scores {self.decay:g}^(k-1) times the share of tests passed."
        )

        # State, set by reset().
        self._task: CodeTask | None = None
        self._expected: list[Any] = []
        self._attempt = 0
        self._best = 0.0
        self._terminated = False
        self._success = False
        self._last_obs = ""
        self._last_info: dict[str, Any] = {}

    @staticmethod
    def _make_limits(limits: Any) -> SandboxLimits:
        if limits is None:
            limits = {}
        if not isinstance(limits, dict):
            raise ValueError(f"limits must be None or a dict with keys among {list(LIMIT_KEYS)}, "
                             f"got {limits!r}")
        unknown = sorted(set(limits) - set(LIMIT_KEYS), key=str)
        if unknown:
            raise ValueError(f"limits has unknown key(s) {unknown}; allowed: {list(LIMIT_KEYS)}")
        merged = {**DEFAULT_LIMITS, **limits}
        if "timeout_s" in limits and "cpu_s" not in limits and is_real(limits["timeout_s"]):
            merged["cpu_s"] = limits["timeout_s"]
        for key, value in limits.items():
            integer = isinstance(DEFAULT_LIMITS[key], int)
            if not (is_int(value) if integer else is_real(value)):
                kind = "an int" if integer else "a number"
                raise ValueError(f"limits[{key!r}] must be {kind}, got {value!r}")
        try:
            return SandboxLimits(**{_LIMIT_FIELDS.get(k, k): (int(v) if isinstance(DEFAULT_LIMITS[k], int)
                                                              else float(v))
                                    for k, v in merged.items()})
        except ValueError as exc:
            msg = str(exc)
            for key, field_name in _LIMIT_FIELDS.items():
                msg = msg.replace(field_name, key)
            raise ValueError(f"limits: {msg}") from None

    # ------------------------------------------------------------------ text
    @staticmethod
    def _task_text(task: CodeTask) -> str:
        return f"Write the Python function\n\n{task.signature}\n\n{task.statement}\n{ANSWER_LINE}"

    def _failure_lines(self, res: SandboxResult) -> tuple[int, list[str]]:
        """(tests passed, descriptions of failed calls in order)."""
        assert self._task is not None
        payload = res.payload
        results = payload["results"] if payload else [None] * len(self._expected)
        passed, failures, reported_stop = 0, [], False
        for args, expected, got in zip(self._task.tests, self._expected, results):
            call = self._task.call_text(args)
            if got is not None and "value" in got and values_match(got["value"], expected):
                passed += 1
                continue
            if got is None:
                if reported_stop:
                    continue
                reported_stop = True
                if res.status == "timeout":
                    text = f"{call} timed out after {self.sandbox_limits.wall_s:g}s"
                elif res.status == "output_limit":
                    text = (f"{call} was stopped: more than {self.sandbox_limits.max_output_bytes}"
                            " bytes of output")
                elif res.status == "memory":
                    text = f"{call} ran out of memory ({self.sandbox_limits.memory_mb} MB)"
                else:
                    text = f"{call} did not finish: the process ended (exit code {res.returncode})"
            elif "error" in got:
                text = f"{call} raised {got['error']}"
            else:
                text = f"{call} returned {got['value']!r}, expected {expected!r}"
            failures.append(_sanitize(text, _MAX_FAILURE_CHARS))
        return passed, failures

    # ------------------------------------------------------------------ gym API
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        self._task = self.tasks[int(self.np_random.integers(len(self.tasks)))]
        self._expected = self._task.expected()
        self._attempt = 0
        self._best = 0.0
        self._terminated = False
        self._success = False
        self._last_obs = self._task_text(self._task)
        self._last_info = self._info(True, 0, "none", 0.0)
        return self._last_obs, {"instructions": self.instructions, **self._last_info}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self._task is None:
            raise RuntimeError("CodeTextEnv.step() called before reset()")
        if self._terminated:
            return self._last_obs, 0.0, True, False, dict(self._last_info)

        self._attempt += 1
        task = self._task
        total = len(task.tests)
        code = extract_code(action, task.function)
        if not code:
            valid, passed, status = False, 0, "no_code"
            head = "No Python code found in your answer."
        else:
            res = run_python(code, function=task.function, calls=task.tests,
                             limits=self.sandbox_limits)
            status = res.status
            if status == "error":
                raise RuntimeError(f"the code sandbox could not be set up: {res.stderr.strip()}")
            payload = res.payload
            valid = payload is not None and payload["error"] is None
            passed, failures = self._failure_lines(res)
            if payload is not None and payload["missing_function"]:
                head = f"Your code does not define the function {task.function}."
            elif payload is not None and payload["error"]:
                head = "Your code could not be loaded: " + _sanitize(payload["error"], 200)
            elif payload is None and status == "timeout":
                head = f"Your code timed out after {self.sandbox_limits.wall_s:g}s while loading."
            elif payload is None and status == "output_limit":
                head = "Your code printed too much output while loading and was stopped."
            elif payload is None:
                head = ("Your code ended the process before any test ran "
                        f"(status {status}, exit code {res.returncode}).")
            elif passed == total:
                head = f"All {total} tests passed."
            else:
                head = f"Passed {passed}/{total} tests. Failed: " + "; ".join(failures[:2])
        score = self.decay ** (self._attempt - 1) * passed / total
        reward = max(0.0, score - self._best)
        self._best = max(self._best, score)
        left = self.max_attempts - self._attempt
        if passed == total:
            self._terminated = self._success = True
            self._last_obs = f"{head}\n{self._task_text(task)}"
        else:
            self._terminated = left <= 0
            tail = "No attempts left." if left <= 0 else f"Attempts left: {left}."
            self._last_obs = f"{head}\n{tail}\n{self._task_text(task)}"
        self._last_info = self._info(valid, passed, status, score)
        return self._last_obs, float(reward), self._terminated, False, dict(self._last_info)

    def _info(self, valid: bool, passed: int, status: str, score: float) -> dict[str, Any]:
        assert self._task is not None
        return {
            "success": bool(self._success),
            "action_is_valid": bool(valid),
            "tests_passed": int(passed),
            "tests_total": len(self._task.tests),
            "sandbox_status": status,
            "score": float(score),
            "attempt": self._attempt,  # answers given so far this episode
            "attempts_left": self.max_attempts - self._attempt,
            "task": self._task.name,
        }

    def render(self) -> str | None:
        if self.render_mode == "ansi" and self._task is not None:
            return self._last_obs
        return None

    # ------------------------------------------------------------------ expert hook
    def demonstration(self) -> tuple[str, str]:
        """(reasoning, action): the task's one-line approach and its reference solution."""
        if self._task is None:
            raise RuntimeError("demonstration() called before reset()")
        if self._terminated:
            raise RuntimeError("demonstration() called after the episode ended")
        return self._task.approach, self._task.reference.strip("\n")

    # ------------------------------------------------------------------ problem identity
    def problem_key(self) -> str:
        """The current task (after ``reset``) as ``code:<task name>``, e.g. ``code:clamp``."""
        if self._task is None:
            raise RuntimeError("problem_key() called before reset()")
        return f"code:{self._task.name}"

    def problem_keys(self) -> list[str]:
        """The key of every task at this ``difficulty`` (each drawn with equal probability)."""
        return [f"code:{t.name}" for t in self.tasks]

    # ------------------------------------------------------------------ read-only state
    @property
    def task(self) -> CodeTask | None:
        """The current task, None before reset."""
        return self._task

