"""Shared helpers for the text envs: kwarg type checks and the text spaces' character sets."""

from __future__ import annotations

import string
from numbers import Real
from typing import Any

import numpy as np

#: printable ASCII without newlines: what an env may echo back from an action
ECHO_CHARSET = string.ascii_letters + string.digits + string.punctuation + " "
OBS_CHARSET = ECHO_CHARSET + "\n"
ACTION_CHARSET = ECHO_CHARSET


def is_int(x: Any) -> bool:
    """An integer (Python or numpy), not a bool."""
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


def is_bool(x: Any) -> bool:
    return isinstance(x, (bool, np.bool_))


def is_real(x: Any) -> bool:
    """A real number, not a bool."""
    return isinstance(x, Real) and not isinstance(x, (bool, np.bool_))


def invalid_action_note(action: Any, valid_actions: tuple[str, ...], max_echo: int = 30) -> str:
    """One line telling the agent its action was invalid (the echo is sanitised and capped)."""
    text = action if isinstance(action, str) else repr(action)
    text = "".join(ch if ch in ECHO_CHARSET else "?" for ch in text)
    if len(text) > max_echo:
        text = text[:max_echo] + "..."
    return f"Invalid action '{text}'. Valid actions: {', '.join(valid_actions)}."


def check_render_mode(render_mode: Any, allowed: list[str]) -> None:
    if render_mode is not None and render_mode not in allowed:
        raise ValueError(f"render_mode must be None or one of {allowed}, got {render_mode!r}")


def grid_text_spaces(size: int) -> tuple[Any, Any]:
    """Observation and action spaces of a text gridworld with a ``size`` x ``size`` board.

    The board is ``size`` rows of ``2 * size - 1`` characters plus newlines; the status line and
    an invalid-action note stay well under the 256 characters of slack.
    """
    from gymnasium import spaces

    obs = spaces.Text(max_length=2 * size * size + 256, min_length=1, charset=OBS_CHARSET)
    return obs, spaces.Text(max_length=64, min_length=0, charset=ACTION_CHARSET)
