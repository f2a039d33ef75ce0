"""Atomic file writes: nothing a reader sees is ever half written.

Every writer goes through :func:`atomic_write`: it opens ``<name>.tmp-<pid>`` beside the target,
lets the caller write, flushes and fsyncs it, then ``os.replace``s it into place (atomic on POSIX),
and removes the temporary file if anything fails on the way. Metrics, the rollout archive, probe
panels, policy weights and checkpoints all use it.
"""

from __future__ import annotations

import gzip
import json
import os
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, Iterator


def tmp_path(path: Path | str) -> Path:
    """The temporary name a write to ``path`` goes through: hidden, same folder, this process's."""
    path = Path(path)
    return path.with_name(f".{path.name}.tmp-{os.getpid()}")


@contextmanager
def atomic_write(path: Path | str, mode: str = "w", *, fsync: bool = True,
                 compress: bool = False) -> Iterator[IO[Any]]:
    """Open a temporary file beside ``path``; on a clean exit fsync it and rename it onto ``path``.

    ``mode`` is ``"w"`` (text, UTF-8) or ``"wb"``; ``compress`` writes gzip. On an exception the
    temporary file is removed and ``path`` is left as it was.
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_write: mode must be 'w' or 'wb', got {mode!r}")
    path = Path(path)
    tmp = tmp_path(path)
    try:
        if compress:
            raw = open(tmp, "wb")
            f: IO[Any] = gzip.open(raw, "wt" if mode == "w" else "wb",
                                   **({"encoding": "utf-8"} if mode == "w" else {}))
        else:
            raw = f = open(tmp, mode, **({"encoding": "utf-8"} if mode == "w" else {}))
        try:
            yield f
        finally:
            if f is not raw:
                f.close()
            raw.flush()
            if fsync:
                os.fsync(raw.fileno())
            raw.close()
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_text(path: Path | str, text: str, *, fsync: bool = True) -> None:
    with atomic_write(path, "w", fsync=fsync) as f:
        f.write(text)


def write_json(path: Path | str, payload: Any, *, fsync: bool = True, **dump_kwargs: Any) -> None:
    with atomic_write(path, "w", fsync=fsync) as f:
        json.dump(payload, f, **({"indent": 1, "sort_keys": True} | dump_kwargs))
