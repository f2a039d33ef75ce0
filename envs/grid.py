"""Shared helpers for text gridworlds (FrozenLake, Sokoban; their gym base is ``grid_env``).

Pure functions on plain Python data, no gymnasium. Conventions:

* A grid is any sequence of rows indexable as ``grid[r][c]`` (list of strings, list of lists,
  2-D numpy array...). Positions are 0-based ``(row, col)`` tuples; row 0 is the top row.
  Only the *rendered text* uses 1-based rows and columns.
* The four moves are, in this fixed order, ``Left, Down, Right, Up`` (the order of gymnasium's
  FrozenLake action ids 0..3). That order is also the BFS tie-break order, see :func:`bfs_path`.
"""

from __future__ import annotations

import re
from collections import deque
from typing import Any, Callable, Sequence

Pos = tuple[int, int]

#: Direction table: action name -> (d_row, d_col). Dict order is the canonical action order.
DIRECTIONS: dict[str, Pos] = {
    "Left": (0, -1),
    "Down": (1, 0),
    "Right": (0, 1),
    "Up": (-1, 0),
}

#: Action names in canonical order.
ACTION_NAMES: tuple[str, ...] = tuple(DIRECTIONS)

#: For each action, the two perpendicular actions (in canonical order).
PERPENDICULAR: dict[str, tuple[str, str]] = {
    "Left": ("Down", "Up"),
    "Down": ("Left", "Right"),
    "Right": ("Down", "Up"),
    "Up": ("Left", "Right"),
}

_LOWER_TO_NAME = {name.lower(): name for name in ACTION_NAMES}


def parse_action(text: Any) -> str | None:
    """Canonical action name for ``text``, or None if it is not one.

    Case-insensitive; surrounding whitespace and one trailing period are ignored, so
    ``" down. "`` -> ``"Down"``. Non-strings -> None.
    """
    if not isinstance(text, str):
        return None
    word = text.strip()
    if word.endswith("."):
        word = word[:-1].rstrip()
    return _LOWER_TO_NAME.get(word.lower())


#: how an env reads a reply (``read``): the whole reply is one move word, or the first / last move
#: word written anywhere in it
READS: tuple[str, ...] = ("word", "first", "last")
_MOVE_WORD = re.compile(r"\b(left|down|right|up)\b", re.IGNORECASE)


def read_action(text: Any, read: str = "word") -> str | None:
    """Canonical action name of a reply, or None if it holds none. ``read="word"``: the reply is
    exactly one move word (:func:`parse_action`); ``"first"`` / ``"last"``: the first / last move
    word written anywhere in it, as a whole word and in any case, as a lenient grader reads a
    worked reply (``"The goal is below, so I move Down."`` -> ``"Down"``; ``"upward"`` is no move
    word)."""
    if read == "word":
        return parse_action(text)
    if read not in READS:
        raise ValueError(f"read must be one of {READS}, got {read!r}")
    if not isinstance(text, str):
        return None
    found = _MOVE_WORD.findall(text)
    if not found:
        return None
    return _LOWER_TO_NAME[(found[0] if read == "first" else found[-1]).lower()]


def in_bounds(pos: Pos, n_rows: int, n_cols: int) -> bool:
    """Whether ``pos`` lies inside an ``n_rows`` x ``n_cols`` grid."""
    return 0 <= pos[0] < n_rows and 0 <= pos[1] < n_cols


def neighbor(pos: Pos, action: str) -> Pos:
    """The cell one step from ``pos`` in direction ``action`` (may lie outside the grid)."""
    dr, dc = DIRECTIONS[action]
    return (pos[0] + dr, pos[1] + dc)


def move(pos: Pos, action: str, n_rows: int, n_cols: int) -> Pos:
    """``pos`` moved one step by ``action``; a move off the grid (into a wall) leaves it in place."""
    nxt = neighbor(pos, action)
    return nxt if in_bounds(nxt, n_rows, n_cols) else pos


def _shape(grid: Sequence[Sequence[Any]]) -> tuple[int, int]:
    n_rows = len(grid)
    n_cols = len(grid[0]) if n_rows else 0
    return n_rows, n_cols


def bfs_distances(
    grid: Sequence[Sequence[Any]],
    goal: Pos,
    passable: Callable[[Any], bool],
    start: Pos | None = None,
) -> dict[Pos, int]:
    """Shortest number of moves from each reachable cell to ``goal`` (4-neighbour BFS).

    A cell can be stood on if ``passable(grid[r][c])`` is true; ``goal`` and ``start`` (if given)
    always count as standable, whatever their content. Only cells that can reach the goal appear.
    """
    n_rows, n_cols = _shape(grid)
    dist: dict[Pos, int] = {goal: 0}
    queue: deque[Pos] = deque([goal])
    while queue:
        cur = queue.popleft()
        for action in ACTION_NAMES:
            prev = neighbor(cur, action)
            if prev in dist or not in_bounds(prev, n_rows, n_cols):
                continue
            if prev != start and not passable(grid[prev[0]][prev[1]]):
                continue
            dist[prev] = dist[cur] + 1
            queue.append(prev)
    return dist


def bfs_path(
    grid: Sequence[Sequence[Any]],
    start: Pos,
    goal: Pos,
    passable: Callable[[Any], bool],
) -> list[str] | None:
    """Shortest 4-neighbour path from ``start`` to ``goal`` as action names, or None if unreachable.

    ``passable(cell_value)`` decides which cells may be entered; ``start`` and ``goal`` are always
    allowed whatever they contain (the start may hold the player symbol, the goal a goal symbol).
    Moves never leave the grid. ``start == goal`` gives ``[]``.

    Tie-break (deterministic): among all shortest paths, the one whose action sequence is
    lexicographically smallest under the order ``Left < Down < Right < Up`` -- i.e. at every step
    the first action in that order that keeps the path shortest.
    """
    n_rows, n_cols = _shape(grid)
    if not (in_bounds(start, n_rows, n_cols) and in_bounds(goal, n_rows, n_cols)):
        raise ValueError(f"start {start} and goal {goal} must lie inside the {n_rows}x{n_cols} grid")
    dist = bfs_distances(grid, goal, passable, start=start)
    if start not in dist:
        return None
    path: list[str] = []
    cur = start
    while cur != goal:
        for action in ACTION_NAMES:
            nxt = neighbor(cur, action)
            if dist.get(nxt) == dist[cur] - 1:
                path.append(action)
                cur = nxt
                break
        else:  # pragma: no cover - impossible if dist is a BFS distance map
            raise RuntimeError("inconsistent BFS distance map")
    return path


# ---------------------------------------------------------------------- what a reasoning states
#: one stated cell, 1-based as the observations write it: ``row 3, column 2`` (also ``row 3
#: column 2``, ``row 3 and column 2``, ``row 3, col 2``); ``_CELL`` captures row and column
_CELL = r"row\s+(\d+)\s*,?\s*(?:and\s+)?col(?:umn)?\s+(\d+)"
_ONE_CELL = r"row\s+\d+\s*,?\s*(?:and\s+)?col(?:umn)?\s+\d+"
_CELL_LIST = rf"{_ONE_CELL}(?:\s*(?:,\s*and|,|;|and)\s*{_ONE_CELL})*"
_CELL_RE = re.compile(_CELL, re.IGNORECASE)

#: a statement of the player's cell: ``I am at``, ``I'm at``, ``you are at`` (the observation's
#: words), ``the player is at``; ``now`` or ``still`` may follow the verb
PLAYER_SUBJECT = r"\b(?:i\s+am|i'm|you\s+are|the\s+player\s+is)\s+(?:now\s+|still\s+)?(?:at|on|in)\s+"
#: a statement of box cells: ``box at``, ``the box is at``, ``boxes are at`` (with a list of cells:
#: ``boxes at row 2, column 3 and row 4, column 4``); ``Boxes on targets: 1 of 2`` states no cell
BOX_SUBJECT = r"\bbox(?:es)?\s+(?:is\s+|are\s+)?(?:at|on|in)\s+"


def stated_cells(text: str, subject: str, many: bool = False) -> list[Pos]:
    """Every cell ``text`` states for ``subject`` (a regex such as :data:`PLAYER_SUBJECT`), as
    0-based ``(row, col)``, in order. A statement is ``subject`` followed by one cell
    (``row R, column C``, case-insensitive) or, with ``many``, by a list of cells joined by
    commas, semicolons or ``and``. A cell off the board is returned as stated (it is wrong)."""
    if not isinstance(text, str):
        raise TypeError(f"the reasoning must be a str, got {type(text).__name__}")
    out: list[Pos] = []
    for m in re.finditer(f"{subject}({_CELL_LIST if many else _ONE_CELL})", text, re.IGNORECASE):
        out += [(int(r) - 1, int(c) - 1) for r, c in _CELL_RE.findall(m.group(1))]
    return out


def share_right(claims: Sequence[bool]) -> float | None:
    """The share of ``claims`` that are right; None when there is none (nothing checkable)."""
    return sum(map(bool, claims)) / len(claims) if claims else None


def render_rows(rows: Sequence[Sequence[str]]) -> str:
    """Render a grid of one-character symbols: symbols separated by single spaces, one row per line."""
    return "\n".join(" ".join(row) for row in rows)
