"""Text Sokoban: ``ragen2/Sokoban-v0``.

A walled room with boxes and targets. The agent reads a plain-text board and answers with one
word (``Left``, ``Down``, ``Right``, ``Up``). Levels are generated backwards from the solved state
(boxes on targets) by random reverse moves in which the player may *pull* a box, so every level is
solvable by construction.

Observation (size 6, example)::

    # # # # # #
    # _ _ _ _ #
    # _ P B _ #
    # _ _ T _ #
    # _ _ _ _ #
    # # # # # #
    You are at row 3, column 3. Boxes on targets: 0 of 1.

Symbols: ``#`` wall, ``_`` floor, ``P`` player, ``B`` box, ``T`` target, ``*`` box on target,
``+`` player on target; rows and columns are 1-based.

Rewards (as in the classic gym-sokoban): -0.1 for every step (invalid actions included), +1 for
each box pushed onto a target, -1 for each box pushed off a target, +10 when all boxes are on
targets (the episode then terminates with ``success=True``). Truncated after ``max_steps`` steps.

An invalid action leaves the state unchanged and prefixes the board with one line:
``Invalid action 'xyz'. Valid actions: Left, Down, Right, Up.``

For tests a fixed level can be loaded with ``reset(options={"level": rows})`` where ``rows`` are
strings of the symbols above (spaces between symbols are ignored).
"""

from __future__ import annotations

from collections import deque
from typing import Any, Iterable, Sequence

import numpy as np

from .checks import check_render_mode, is_int
from .grid import (ACTION_NAMES, BOX_SUBJECT, DIRECTIONS, PLAYER_SUBJECT, Pos, neighbor, render_rows,
                   share_right, stated_cells)
from .grid_env import GridTextEnv

__all__ = ["SokobanTextEnv", "solve_sokoban"]

_MAX_ATTEMPTS = 1000  # generated levels tried before giving up (see _generate_level)

SYM_WALL, SYM_FLOOR, SYM_PLAYER, SYM_BOX, SYM_TARGET = "#", "_", "P", "B", "T"
SYM_BOX_ON_TARGET, SYM_PLAYER_ON_TARGET = "*", "+"

STEP_REWARD = -0.1
BOX_ON_TARGET_REWARD = 1.0
SOLVED_REWARD = 10.0


def solve_sokoban(
    walls: Sequence[Sequence[Any]],
    boxes: Iterable[Pos],
    targets: Iterable[Pos],
    player: Pos,
    max_states: int = 200_000,
) -> list[str] | None:
    """Shortest action list solving a Sokoban state, or None if unsolvable within ``max_states``.

    ``walls`` is a 2-D grid (bool array or rows) where a truthy cell is a wall; cells outside it
    count as walls. ``boxes``/``targets`` are 0-based (row, col) positions, ``player`` too.
    BFS over (player, frozenset(boxes)); moves are expanded in the order Left, Down, Right, Up,
    so the result is deterministic. Already solved -> ``[]``.
    """
    n_rows = len(walls)
    n_cols = len(walls[0]) if n_rows else 0
    wall = {(r, c) for r in range(n_rows) for c in range(n_cols) if walls[r][c]}

    def blocked(p: Pos) -> bool:
        return p in wall or not (0 <= p[0] < n_rows and 0 <= p[1] < n_cols)

    target_set = frozenset(tuple(t) for t in targets)
    start = (tuple(player), frozenset(tuple(b) for b in boxes))
    if start[1] <= target_set:
        return []
    parent: dict[Any, Any] = {start: None}
    queue: deque = deque([start])
    while queue:
        state = queue.popleft()
        pos, bxs = state
        for action in ACTION_NAMES:
            nxt = neighbor(pos, action)
            if blocked(nxt):
                continue
            if nxt in bxs:
                dest = neighbor(nxt, action)
                if blocked(dest) or dest in bxs:
                    continue
                new_boxes = (bxs - {nxt}) | {dest}
            else:
                new_boxes = bxs
            new_state = (nxt, new_boxes)
            if new_state in parent:
                continue
            parent[new_state] = (state, action)
            if new_boxes <= target_set:
                plan: list[str] = []
                cur = new_state
                while parent[cur] is not None:
                    cur, act = parent[cur]
                    plan.append(act)
                return plan[::-1]
            if len(parent) >= max_states:
                return None
            queue.append(new_state)
    return None


class SokobanTextEnv(GridTextEnv):
    """Sokoban with text observations and one-word text actions.

    Args:
        size: side of the square room including the wall border, an int >= 5.
        num_boxes: number of boxes (and targets), an int in 1..3.
        reverse_steps: random reverse moves (with pulls) used to generate a level, an int >= 1.
        max_steps: the episode is truncated once this many ``step`` calls (valid or not) were made.
        render_mode: None or ``"ansi"`` (``render()`` then returns the observation text).
    """

    def __init__(
        self,
        size: int = 6,
        num_boxes: int = 1,
        reverse_steps: int = 30,
        max_steps: int = 100,
        render_mode: str | None = None,
    ) -> None:
        if not is_int(size) or size < 5:
            raise ValueError(f"size must be an int >= 5, got {size!r}")
        if not is_int(num_boxes) or not 1 <= num_boxes <= 3:
            raise ValueError(f"num_boxes must be an int in 1..3, got {num_boxes!r}")
        if not is_int(reverse_steps) or reverse_steps < 1:
            raise ValueError(f"reverse_steps must be an int >= 1, got {reverse_steps!r}")
        if not is_int(max_steps) or max_steps < 1:
            raise ValueError(f"max_steps must be an int >= 1, got {max_steps!r}")
        check_render_mode(render_mode, self.metadata["render_modes"])

        super().__init__(size, max_steps, render_mode)
        self.num_boxes = int(num_boxes)
        self.reverse_steps = int(reverse_steps)
        self.instructions: str = (
            "A Sokoban room: # is a wall, _ is floor, P is you, B is a box, T is a target, "
            "* is a box on a target, + is you on a target. "
            "Rows and columns count from 1 at the top left.\n"
            "Actions: Left, Down, Right, Up; each moves you one cell and pushes a box in front of "
            "you if the cell behind it is free (boxes cannot be pulled). Push every box onto a "
            "target. Each step costs 0.1, a box onto a target gives +1, off a target -1, "
            "all boxes on targets +10."
        )

        # State, set by reset().
        self._walls: np.ndarray | None = None  # bool (rows, cols)
        self._targets: frozenset[Pos] = frozenset()
        self._boxes: set[Pos] = set()
        self._problem_key: str | None = None

    # ------------------------------------------------------------------ text
    def _board_text(self) -> str:
        walls = self._walls
        assert walls is not None and self._player is not None
        rows = [
            [SYM_WALL if walls[r, c] else SYM_FLOOR for c in range(walls.shape[1])]
            for r in range(walls.shape[0])
        ]
        for r, c in self._targets:
            rows[r][c] = SYM_TARGET
        for r, c in self._boxes:
            rows[r][c] = SYM_BOX_ON_TARGET if (r, c) in self._targets else SYM_BOX
        pr, pc = self._player
        rows[pr][pc] = SYM_PLAYER_ON_TARGET if self._player in self._targets else SYM_PLAYER
        return render_rows(rows)

    def _on_targets(self) -> int:
        return len(self._boxes & self._targets)

    def _status_text(self) -> str:
        pr, pc = self._player  # type: ignore[misc]
        return (
            f"You are at row {pr + 1}, column {pc + 1}. "
            f"Boxes on targets: {self._on_targets()} of {len(self._boxes)}."
        )

    # ------------------------------------------------------------------ levels
    def _generate_level(self) -> tuple[np.ndarray, frozenset[Pos], set[Pos], Pos]:
        """Walls, targets, boxes, player for a random solvable level drawn from ``self.np_random``.

        Boxes start on targets; the game is then played backwards for ``reverse_steps`` random
        moves, pulling the box behind the player (if any) along. Levels where every box is still
        on a target are rejected and redrawn.
        """
        rng = self.np_random
        n = self.size
        interior = [(r, c) for r in range(1, n - 1) for c in range(1, n - 1)]
        # A few interior walls, always leaving plenty of floor.
        max_extra = max(0, min(len(interior) // 6, len(interior) - self.num_boxes - 6))
        for _ in range(_MAX_ATTEMPTS):
            walls = np.zeros((n, n), dtype=bool)
            walls[0, :] = walls[-1, :] = walls[:, 0] = walls[:, -1] = True
            k = int(rng.integers(0, max_extra + 1))
            if k:
                for i in rng.choice(len(interior), size=k, replace=False):
                    walls[interior[int(i)]] = True
            floor = [p for p in interior if not walls[p]]
            if not _connected(walls, floor):
                continue
            picks = rng.choice(len(floor), size=self.num_boxes + 1, replace=False)
            targets = frozenset(floor[int(i)] for i in picks[:-1])
            player = floor[int(picks[-1])]
            boxes = set(targets)
            for _ in range(self.reverse_steps):
                action = ACTION_NAMES[int(rng.integers(4))]
                nxt = neighbor(player, action)
                if walls[nxt] or nxt in boxes:
                    continue
                dr, dc = DIRECTIONS[action]
                behind = (player[0] - dr, player[1] - dc)
                if behind in boxes:  # pull: the box follows into the player's old cell
                    boxes.remove(behind)
                    boxes.add(player)
                player = nxt
            if not boxes <= targets:
                return walls, targets, boxes, player
        raise RuntimeError(
            f"could not generate a Sokoban level with a box off target in {_MAX_ATTEMPTS} tries"
        )

    def _parse_level(self, level: Any) -> tuple[np.ndarray, frozenset[Pos], set[Pos], Pos]:
        if isinstance(level, str) or not isinstance(level, Sequence) or not level:
            raise ValueError(f"options['level'] must be a non-empty list of row strings, got {level!r}")
        rows = [str(row).replace(" ", "") for row in level]
        n_rows, n_cols = len(rows), len(rows[0])
        if any(len(row) != n_cols for row in rows) or n_cols == 0:
            raise ValueError(f"options['level'] rows must all have the same length, got {rows!r}")
        if n_rows > self.size or n_cols > self.size:
            raise ValueError(f"options['level'] must fit in {self.size}x{self.size}, got {n_rows}x{n_cols}")
        allowed = {SYM_WALL, SYM_FLOOR, SYM_PLAYER, SYM_BOX, SYM_TARGET, SYM_BOX_ON_TARGET, SYM_PLAYER_ON_TARGET}
        walls = np.zeros((n_rows, n_cols), dtype=bool)
        targets: set[Pos] = set()
        boxes: set[Pos] = set()
        players: list[Pos] = []
        for r, row in enumerate(rows):
            for c, ch in enumerate(row):
                if ch not in allowed:
                    raise ValueError(f"options['level'] has unknown symbol {ch!r} at row {r + 1}, column {c + 1}")
                border = r in (0, n_rows - 1) or c in (0, n_cols - 1)
                if border and ch != SYM_WALL:
                    raise ValueError("options['level'] must be surrounded by walls '#'")
                walls[r, c] = ch == SYM_WALL
                if ch in (SYM_TARGET, SYM_BOX_ON_TARGET, SYM_PLAYER_ON_TARGET):
                    targets.add((r, c))
                if ch in (SYM_BOX, SYM_BOX_ON_TARGET):
                    boxes.add((r, c))
                if ch in (SYM_PLAYER, SYM_PLAYER_ON_TARGET):
                    players.append((r, c))
        if len(players) != 1:
            raise ValueError(f"options['level'] needs exactly one player, got {len(players)}")
        if not boxes or len(boxes) != len(targets):
            raise ValueError(
                f"options['level'] needs as many targets as boxes (>= 1), got {len(boxes)} boxes "
                f"and {len(targets)} targets"
            )
        if boxes <= targets:
            raise ValueError("options['level'] must have at least one box off target")
        return walls, frozenset(targets), boxes, players[0]

    # ------------------------------------------------------------------ episode
    def _new_episode(self, options: dict[str, Any] | None) -> None:
        if options and options.get("level") is not None:
            level = self._parse_level(options["level"])
        else:
            level = self._generate_level()
        self._walls, self._targets, self._boxes, self._player = level
        self._problem_key = "sokoban:" + self._board_text().replace(" ", "").replace("\n", "/")

    def _advance(self, name: str | None) -> tuple[float, None]:
        reward = STEP_REWARD
        if name is not None:
            before = self._on_targets()
            self._apply_move(name)
            after = self._on_targets()
            reward += BOX_ON_TARGET_REWARD * (after - before)
            if self._boxes <= self._targets:
                self._terminated = True
                self._success = True
                reward += SOLVED_REWARD
        return reward, None

    def _apply_move(self, action: str) -> None:
        walls = self._walls
        assert walls is not None and self._player is not None
        nxt = neighbor(self._player, action)
        if walls[nxt]:
            return
        if nxt in self._boxes:
            dest = neighbor(nxt, action)
            if walls[dest] or dest in self._boxes:
                return
            self._boxes.remove(nxt)
            self._boxes.add(dest)
        self._player = nxt

    def _info(self, valid: bool, detail: None = None) -> dict[str, Any]:
        return {
            "success": bool(self._success),
            "action_is_valid": bool(valid),
            "steps": self._steps,
            "boxes_on_targets": self._on_targets(),
        }

    # ------------------------------------------------------------------ solver / expert hook
    def solve(self, max_states: int = 200_000) -> list[str] | None:
        """Shortest plan from the current state (see :func:`solve_sokoban`), None if none found."""
        if self._player is None:
            raise RuntimeError("solve() called before reset()")
        return solve_sokoban(self._walls, self._boxes, self._targets, self._player, max_states)  # type: ignore[arg-type]

    def demonstration(self) -> tuple[str, str]:
        """(reasoning, action) for the current state: the solver's first move, or ``Left`` in a dead state."""
        self._check_demonstrable()
        where = f"I am at row {self._player[0] + 1}, column {self._player[1] + 1}. " \
            f"Boxes on targets: {self._on_targets()} of {len(self._boxes)}."
        plan = self.solve()
        if plan:
            return f"{where} The plan starts {plan[0]}.", plan[0]
        # a dead state (a box pushed into a corner, say): no plan exists; any move will do
        return f"{where} No plan is left from here.", ACTION_NAMES[0]

    # ------------------------------------------------------------------ grounding hook
    def ground(self, reasoning: str) -> float | None:
        """Does ``reasoning`` state the true positions of the player and the boxes? Checked
        against the current state, i.e. before the action the reasoning leads to is applied.

        One claim per statement of the player's cell (``I am at row R, column C``; also ``I'm
        at``, ``you are at``, ``the player is at``), right when it names the player's cell; one
        claim per box cell stated (``box at row R, column C``, ``boxes are at row R, column C and
        row R2, column C2``, see :func:`ragen2_envs.grid.stated_cells`), right when a box stands
        there. The result is the share of right claims (player right and one of two stated boxes
        wrong: 2/3), None when the reasoning states no cell. ``Boxes on targets: k of n`` is not
        checked: a template that repeats ``0 of n`` is right until the first push.
        """
        if self._player is None:
            raise RuntimeError("ground() called before reset()")
        claims = [cell == self._player for cell in stated_cells(reasoning, PLAYER_SUBJECT)]
        claims += [cell in self._boxes for cell in stated_cells(reasoning, BOX_SUBJECT, many=True)]
        return share_right(claims)

    # ------------------------------------------------------------------ state coordinates
    def state_coordinates(self) -> dict[str, int | str]:
        """The player's cell (1-based: ``row``, ``col``) and the boxes' cells as one value
        (``boxes``: ``"R,C;R,C"``, 1-based, sorted). The MI monitor's contrast
        (:mod:`ragen2.collapse.contrast`) asks whether the reasoning tells apart inputs of the
        same level that differ in one of them (the player's row, its column, or the boxes)."""
        if self._player is None:
            raise RuntimeError("state_coordinates() called before reset()")
        boxes = ";".join(f"{r + 1},{c + 1}" for r, c in sorted(self._boxes))
        return {"row": self._player[0] + 1, "col": self._player[1] + 1, "boxes": boxes}

    # ------------------------------------------------------------------ problem identity
    def problem_key(self) -> str:
        """The current level (after ``reset``) as ``sokoban:`` and its initial board, rows
        joined by ``/`` (the same key for the whole episode, whatever was pushed since)."""
        if self._problem_key is None:
            raise RuntimeError("problem_key() called before reset()")
        return self._problem_key

    def problem_keys(self) -> None:
        """Not enumerated (levels come from random reverse play): None."""
        return None

    # ------------------------------------------------------------------ read-only state
    @property
    def boxes(self) -> frozenset[Pos]:
        """0-based (row, col) positions of the boxes."""
        return frozenset(self._boxes)

    @property
    def targets(self) -> frozenset[Pos]:
        """0-based (row, col) positions of the targets."""
        return self._targets

    @property
    def walls(self) -> np.ndarray | None:
        """Copy of the bool wall mask, None before reset."""
        return None if self._walls is None else self._walls.copy()


def _connected(walls: np.ndarray, floor: list[Pos]) -> bool:
    """Whether all ``floor`` cells form one 4-connected region."""
    if not floor:
        return False
    seen = {floor[0]}
    queue = deque([floor[0]])
    while queue:
        cur = queue.popleft()
        for action in ACTION_NAMES:
            nxt = neighbor(cur, action)
            if nxt not in seen and not walls[nxt]:
                seen.add(nxt)
                queue.append(nxt)
    return len(seen) == len(floor)
