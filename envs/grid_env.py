"""The base of the text gridworlds (FrozenLake, Sokoban): the reset/step protocol they share.

A subclass draws or loads its board in :meth:`GridTextEnv._new_episode` (from ``self.np_random``,
which ``reset(seed=...)`` seeds), moves the player in :meth:`GridTextEnv._advance` and draws the
board in :meth:`GridTextEnv._board_text` / :meth:`GridTextEnv._status_text`. The base does the
rest, the same way for every grid:

* ``reset`` seeds, starts a fresh episode and returns the board with
  ``info = {"instructions", "success": False, "action_is_valid": True}``;
* ``step`` parses the one-word action (``Left``, ``Down``, ``Right``, ``Up``; anything else is an
  invalid action: it costs a step, leaves the state, and prefixes the board with a note; a grid
  built with ``read="first"`` or ``"last"`` takes the first or last move word of a longer reply,
  :func:`ragen2_envs.grid.read_action`), counts
  the step, truncates after ``max_steps`` steps, and after the episode ended answers every step
  with the final board, reward 0 and the same flags;
* ``render`` in ``"ansi"`` mode returns the observation text.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import gymnasium as gym

from .checks import grid_text_spaces, invalid_action_note
from .grid import ACTION_NAMES, Pos, read_action

__all__ = ["GridTextEnv"]

_MAX_ECHO = 30  # longest invalid action echoed back verbatim


class GridTextEnv(gym.Env, ABC):
    """A square text board, a player and one-word moves; see the module docstring."""

    metadata = {"render_modes": ["ansi"], "render_fps": 4}
    #: every action word the env accepts (used e.g. to make warm-start demonstrations imperfect)
    valid_actions: tuple[str, ...] = ACTION_NAMES
    instructions: str

    def __init__(self, size: int, max_steps: int, render_mode: str | None,
                 read: str = "word") -> None:
        """Set after the subclass has checked its kwargs."""
        self.size = int(size)
        self.max_steps = int(max_steps)
        self.render_mode = render_mode
        self.read = read  # how a reply is read (ragen2_envs.grid.READS)
        self.observation_space, self.action_space = grid_text_spaces(self.size)
        # State, set by reset().
        self._player: Pos | None = None
        self._steps = 0
        self._terminated = False
        self._truncated = False
        self._success = False

    # ------------------------------------------------------------------ what a grid defines
    @abstractmethod
    def _new_episode(self, options: dict[str, Any] | None) -> None:
        """Draw (from ``self.np_random``) or load this episode's board; place the player."""
        raise NotImplementedError

    @abstractmethod
    def _advance(self, name: str | None) -> tuple[float, Any]:
        """One counted step: ``name`` is the parsed action, None when the action was invalid.

        Updates the board, ``_terminated`` and ``_success``; returns the reward and the step's
        detail for :meth:`_info` (FrozenLake: the direction taken after a slip).
        """
        raise NotImplementedError

    @abstractmethod
    def _info(self, valid: bool, detail: Any) -> dict[str, Any]:
        """``info`` of a step; ``detail`` is None for a step after the episode ended."""
        raise NotImplementedError

    @abstractmethod
    def _board_text(self) -> str:
        raise NotImplementedError

    @abstractmethod
    def _status_text(self) -> str:
        raise NotImplementedError

    # ------------------------------------------------------------------ gym API
    def _observation(self) -> str:
        return f"{self._board_text()}\n{self._status_text()}"

    def _noted(self, action: Any, valid: bool) -> str:
        """The observation, prefixed with the invalid-action note when the action was invalid."""
        obs = self._observation()
        if not valid:
            obs = f"{invalid_action_note(action, ACTION_NAMES, _MAX_ECHO)}\n{obs}"
        return obs

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        self._new_episode(options)
        self._steps = 0
        self._terminated = False
        self._truncated = False
        self._success = False
        info = {"instructions": self.instructions, "success": False, "action_is_valid": True}
        return self._observation(), info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self._player is None:
            raise RuntimeError(f"{type(self).__name__}.step() called before reset()")
        name = read_action(action, self.read)
        valid = name is not None

        if self._terminated or self._truncated:
            # Episode already over: no-op, same flags, zero reward.
            return (self._noted(action, valid), 0.0, self._terminated, self._truncated,
                    self._info(valid, None))

        self._steps += 1
        reward, detail = self._advance(name)
        if not self._terminated and self._steps >= self.max_steps:
            self._truncated = True
        return (self._noted(action, valid), float(reward), self._terminated, self._truncated,
                self._info(valid, detail))

    def render(self) -> str | None:
        if self.render_mode == "ansi" and self._player is not None:
            return self._observation()
        return None

    def _check_demonstrable(self) -> None:
        if self._player is None:
            raise RuntimeError("demonstration() called before reset()")
        if self._terminated or self._truncated:
            raise RuntimeError("demonstration() called after the episode ended")

    # ------------------------------------------------------------------ read-only state
    @property
    def player_pos(self) -> Pos | None:
        """0-based (row, col) of the player, None before reset."""
        return self._player
