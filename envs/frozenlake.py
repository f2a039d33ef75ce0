"""Text FrozenLake: ``ragen2/FrozenLake-v0``.

A square lake of frozen ice with random holes. The agent reads a plain-text board and answers
with one word (``Left``, ``Down``, ``Right``, ``Up``). Every map is solvable by construction.

Observation (size 4, example)::

    _ _ O _
    P _ _ _
    _ O _ G
    _ _ _ _
    You are at row 2, column 1. The goal is at row 3, column 4.

Symbols: ``P`` player, ``G`` goal, ``O`` hole, ``_`` frozen ice; rows and columns are 1-based.
After the episode ends the board shows the final state:

* goal reached: ``P`` is drawn on the goal cell and the last line is
  ``You are at row R, column C. You reached the goal.``
* fell into a hole: ``X`` is drawn on the hole cell and the last line is
  ``You are at row R, column C. You fell into a hole.``

An invalid action leaves the state unchanged and prefixes the board with one line:
``Invalid action 'xyz'. Valid actions: Left, Down, Right, Up.``

With ``read="first"`` or ``"last"`` a free-text reply is read for its first or last move word
(``rollout.response_format=plain``, where the whole reply is the action: ``"The goal is below
me, so Down."`` moves Down), and the instructions end with
``Reply with one move: Left, Down, Right or Up.``; a reply without a move word is invalid.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .checks import check_render_mode, is_bool, is_int, is_real
from .grid import (PERPENDICULAR, PLAYER_SUBJECT, READS, bfs_path, move, render_rows, share_right,
                   stated_cells)
from .grid_env import GridTextEnv

__all__ = ["FrozenLakeTextEnv"]

_MAX_ATTEMPTS = 200  # random maps tried before carving a path (see _generate_map)

SYM_PLAYER, SYM_GOAL, SYM_HOLE, SYM_ICE, SYM_PLAYER_IN_HOLE = "P", "G", "O", "_", "X"


class FrozenLakeTextEnv(GridTextEnv):
    """FrozenLake with text observations and one-word text actions.

    Args:
        size: side of the square lake, an int >= 2.
        hole_prob: probability that a cell is a hole, in [0, 0.9).
        is_slippery: if True, a move may slip sideways (see ``slip_prob``).
        slip_prob: with ``is_slippery``, probability in [0, 1] that the intended move is replaced
            by one of its two perpendicular moves (each with ``slip_prob / 2``), drawn from
            ``self.np_random``.
        max_steps: the episode is truncated once this many ``step`` calls (valid or not) were made.
        random_start_goal: draw start and goal cells at random per seed; if False the start is
            the top-left cell and the goal the bottom-right cell.
        read: how a reply is read: ``"word"`` (default) it is exactly one move word (``Down``,
            ``down.``); ``"first"`` / ``"last"`` the first / last move word written anywhere in
            it (:func:`ragen2_envs.grid.read_action`), for free-text replies.
        render_mode: None or ``"ansi"`` (``render()`` then returns the observation text).
    """

    def __init__(
        self,
        size: int = 4,
        hole_prob: float = 0.2,
        is_slippery: bool = False,
        slip_prob: float = 1.0 / 3.0,
        max_steps: int = 100,
        random_start_goal: bool = True,
        render_mode: str | None = None,
        read: str = "word",
    ) -> None:
        if not is_int(size) or size < 2:
            raise ValueError(f"size must be an int >= 2, got {size!r}")
        if not is_real(hole_prob) or not 0.0 <= hole_prob < 0.9:
            raise ValueError(f"hole_prob must be a number in [0, 0.9), got {hole_prob!r}")
        if not is_bool(is_slippery):
            raise ValueError(f"is_slippery must be a bool (True or False), got {is_slippery!r}")
        if not is_real(slip_prob) or not 0.0 <= slip_prob <= 1.0:
            raise ValueError(f"slip_prob must be a number in [0, 1], got {slip_prob!r}")
        if not is_int(max_steps) or max_steps < 1:
            raise ValueError(f"max_steps must be an int >= 1, got {max_steps!r}")
        if not is_bool(random_start_goal):
            raise ValueError(
                f"random_start_goal must be a bool (True or False), got {random_start_goal!r}"
            )
        if read not in READS:
            raise ValueError(f"read must be one of {READS}, got {read!r}")
        check_render_mode(render_mode, self.metadata["render_modes"])

        super().__init__(size, max_steps, render_mode, read)
        self.hole_prob = float(hole_prob)
        self.is_slippery = bool(is_slippery)
        self.slip_prob = float(slip_prob)
        self.random_start_goal = bool(random_start_goal)

        self.instructions: str = self._make_instructions()

        # State, set by reset().
        self._holes: np.ndarray | None = None  # bool (n, n), True where a hole is
        self._start: tuple[int, int] | None = None
        self._goal: tuple[int, int] | None = None
        self._in_hole = False

    # ------------------------------------------------------------------ text
    def _make_instructions(self) -> str:
        lines = [
            "A frozen lake grid: P is you, G is the goal, O is a hole, _ is ice. "
            "Rows and columns count from 1 at the top left.",
            "Actions: Left, Down, Right, Up; each moves you one cell, the edge blocks. "
            "Reaching G gives reward 1; stepping onto O ends the game (shown as X).",
        ]
        if self.is_slippery and self.slip_prob > 0:
            lines.append(
                f"The ice is slippery: with probability {self.slip_prob:.2f} a move goes in one of "
                "the two perpendicular directions instead."
            )
        if self.read != "word":  # a free-text reply: say what it should hold
            lines.append("Reply with one move: Left, Down, Right or Up.")
        return "\n".join(lines)

    def _board_text(self) -> str:
        assert self._holes is not None and self._player is not None and self._goal is not None
        n = self.size
        rows = [[SYM_HOLE if self._holes[r, c] else SYM_ICE for c in range(n)] for r in range(n)]
        gr, gc = self._goal
        rows[gr][gc] = SYM_GOAL
        pr, pc = self._player
        rows[pr][pc] = SYM_PLAYER_IN_HOLE if self._in_hole else SYM_PLAYER
        return render_rows(rows)

    def _status_text(self) -> str:
        pr, pc = self._player  # type: ignore[misc]
        where = f"You are at row {pr + 1}, column {pc + 1}."
        if self._success:
            return f"{where} You reached the goal."
        if self._in_hole:
            return f"{where} You fell into a hole."
        gr, gc = self._goal  # type: ignore[misc]
        return f"{where} The goal is at row {gr + 1}, column {gc + 1}."

    # ------------------------------------------------------------------ map
    def _generate_map(self) -> tuple[np.ndarray, tuple[int, int], tuple[int, int]]:
        """Random holes, distinct start/goal that are not holes, retried until BFS finds a path.

        After ``_MAX_ATTEMPTS`` unsolvable draws (only plausible for large lakes with hole_prob
        near 0.9) the last draw is made solvable by clearing the holes on a random monotone
        staircase path from start to goal. Everything uses ``self.np_random``, so a seed fixes
        the map.
        """
        rng = self.np_random
        n = self.size
        holes = np.zeros((n, n), dtype=bool)
        start, goal = (0, 0), (n - 1, n - 1)
        for _ in range(_MAX_ATTEMPTS):
            holes = rng.random((n, n)) < self.hole_prob
            if self.random_start_goal:
                s, g = rng.choice(n * n, size=2, replace=False)
                start, goal = divmod(int(s), n), divmod(int(g), n)
            holes[start] = False
            holes[goal] = False
            if bfs_path(holes, start, goal, passable=_not_hole) is not None:
                return holes, start, goal
        # Fallback: carve a staircase path (moves toward the goal in random row/column order).
        r, c = start
        gr, gc = goal
        moves = ["r"] * abs(gr - r) + ["c"] * abs(gc - c)
        rng.shuffle(moves)
        for m in moves:
            if m == "r":
                r += 1 if gr > r else -1
            else:
                c += 1 if gc > c else -1
            holes[r, c] = False
        return holes, start, goal

    # ------------------------------------------------------------------ episode
    def _new_episode(self, options: dict[str, Any] | None) -> None:
        self._holes, self._start, self._goal = self._generate_map()
        self._player = self._start
        self._in_hole = False

    def _advance(self, name: str | None) -> tuple[float, str | None]:
        reward = 0.0
        effective = None
        if name is not None:
            effective = name
            if self.is_slippery and self.slip_prob > 0 and self.np_random.random() < self.slip_prob:
                effective = PERPENDICULAR[name][int(self.np_random.integers(2))]
            self._player = move(self._player, effective, self.size, self.size)  # type: ignore[arg-type]
            if self._player == self._goal:
                self._terminated = True
                self._success = True
                reward = 1.0
            elif self._holes[self._player]:  # type: ignore[index]
                self._terminated = True
                self._in_hole = True
        return reward, effective

    def _info(self, valid: bool, effective: str | None) -> dict[str, Any]:
        return {
            "success": bool(self._success),
            "action_is_valid": bool(valid),
            "effective_action": effective,  # direction actually taken (after a slip), or None
            "steps": self._steps,
        }

    # ------------------------------------------------------------------ expert hook
    def demonstration(self) -> tuple[str, str]:
        """(reasoning, action) for the current state; the action is the first BFS shortest-path move.

        Ties between shortest paths are broken in the order Left, Down, Right, Up (see
        :func:`ragen2_envs.grid.bfs_path`).
        """
        self._check_demonstrable()
        path = bfs_path(self._holes, self._player, self._goal, passable=_not_hole)  # type: ignore[arg-type]
        if not path:  # unreachable: maps are solvable and the player only stands on safe cells
            raise RuntimeError("no path to the goal from the current state")
        action = path[0]
        pr, pc = self._player
        gr, gc = self._goal  # type: ignore[misc]
        reasoning = (
            f"I am at row {pr + 1}, column {pc + 1}. The goal is at row {gr + 1}, column {gc + 1}. "
            f"The shortest safe path starts {action}."
        )
        return reasoning, action

    # ------------------------------------------------------------------ grounding hook
    def ground(self, reasoning: str) -> float | None:
        """Does ``reasoning`` state the true position? Checked against the current state, i.e.
        before the action the reasoning leads to is applied.

        Every statement of the player's cell (``I am at row R, column C``, as the demonstrations
        write it; also ``I'm at``, ``you are at``, ``the player is at``, see
        :func:`ragen2_envs.grid.stated_cells`) is one claim; the result is the share of claims
        that name the player's cell (1.0 or 0.0 for the usual single statement), None when the
        reasoning states no position. The goal's cell is not checked: on the default layout it
        never moves, so a template states it right.
        """
        if self._player is None:
            raise RuntimeError("ground() called before reset()")
        return share_right([cell == self._player for cell in stated_cells(reasoning, PLAYER_SUBJECT)])

    # ------------------------------------------------------------------ state coordinates
    def state_coordinates(self) -> dict[str, int]:
        """The player's cell, 1-based as the observations write it: ``{"row": R, "col": C}``.
        The MI monitor's contrast (:mod:`ragen2.collapse.contrast`) asks whether the reasoning
        tells apart inputs of the same map that differ in one of them."""
        if self._player is None:
            raise RuntimeError("state_coordinates() called before reset()")
        return {"row": self._player[0] + 1, "col": self._player[1] + 1}

    # ------------------------------------------------------------------ problem identity
    def problem_key(self) -> str:
        """The current map (after ``reset``) as ``frozenlake:`` and its rows joined by ``/``,
        ``S`` the start, ``G`` the goal, ``O`` a hole, ``_`` ice (``frozenlake:S___/_O__/...``)."""
        if self._holes is None or self._start is None or self._goal is None:
            raise RuntimeError("problem_key() called before reset()")
        rows = [["O" if h else "_" for h in row] for row in self._holes]
        rows[self._start[0]][self._start[1]] = "S"
        rows[self._goal[0]][self._goal[1]] = "G"
        return "frozenlake:" + "/".join("".join(r) for r in rows)

    def problem_keys(self) -> None:
        """Not enumerated (maps are drawn with very unequal probabilities): None."""
        return None

    # ------------------------------------------------------------------ read-only state
    @property
    def goal_pos(self) -> tuple[int, int] | None:
        """0-based (row, col) of the goal, None before reset."""
        return self._goal

    @property
    def start_pos(self) -> tuple[int, int] | None:
        """0-based (row, col) of the start cell, None before reset."""
        return self._start

    @property
    def holes(self) -> np.ndarray | None:
        """Copy of the (size, size) bool hole mask, None before reset."""
        return None if self._holes is None else self._holes.copy()


def _not_hole(cell: Any) -> bool:
    return not bool(cell)
