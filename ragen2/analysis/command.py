"""What the three analysis commands share (``ragen2-analyze``, ``ragen2-report``,
``ragen2-sweep-report``): a bad input is one ``PROG: error: …`` line on stderr and exit status 2,
a part left out is a ``PROG: warning: …`` line, and counts are integers >= 1."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import NoReturn


@dataclass(frozen=True)
class Command:
    """One command's error and warning lines, under its program name."""

    prog: str

    def fail(self, message: str) -> NoReturn:
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        raise SystemExit(2)

    def warn(self, message: str) -> None:
        print(f"{self.prog}: warning: {message}", file=sys.stderr)

    @contextmanager
    def bad_input_exits_2(self) -> Iterator[None]:
        """An ``OSError`` or ``ValueError`` inside (an unreadable or corrupt file) becomes
        :meth:`fail` with its message."""
        try:
            yield
        except (OSError, ValueError) as e:
            self.fail(str(e))


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {v}")
    return v
