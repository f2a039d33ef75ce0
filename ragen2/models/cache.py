"""Build-once model directories in the cache root: atomic, process- and thread-safe.

A complete entry is a directory holding a marker file with its key and every required file. It
is built into a temporary directory next to it, under an ``fcntl.flock`` on ``<name>.lock``, and
``os.rename``-d into place, so a reader never sees half a model and two builders never race.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any


def is_complete(path: Path, key: str, marker_file: str, required: Sequence[str]) -> bool:
    """``path`` holds ``marker_file`` naming ``key`` and every file of ``required``."""
    try:
        marker = json.loads((path / marker_file).read_text())
    except (OSError, ValueError):
        return False
    if not isinstance(marker, dict) or marker.get("key") != key:
        return False
    return all((path / f).is_file() for f in required)


def ensure_built(root: Path, name: str, key: str, build: Callable[[Path], None], *,
                 marker_file: str, required: Sequence[str],
                 marker: Mapping[str, Any] | None = None) -> Path:
    """``root/name``, built once by ``build(tmp_dir)`` if it is not complete for ``key``.

    A complete entry is returned without taking the lock (nor importing anything). Leftovers of a
    killed build and entries of another key are replaced.
    """
    import fcntl

    final = root / name
    if is_complete(final, key, marker_file, required):
        return final
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f"{name}.lock", "a+b") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        try:
            if is_complete(final, key, marker_file, required):
                return final
            # Under the lock nobody else is building this entry: leftovers are stale.
            for stale in root.glob(f".{name}.tmp-*"):
                shutil.rmtree(stale, ignore_errors=True)
            if final.is_symlink() or final.is_file():
                final.unlink()
            elif final.exists():
                shutil.rmtree(final)  # incomplete / foreign-key leftover

            tmp = Path(tempfile.mkdtemp(prefix=f".{name}.tmp-", dir=root))
            try:
                build(tmp)
                doc = {**(marker or {}), "key": key}
                (tmp / marker_file).write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
                os.chmod(tmp, 0o755)  # mkdtemp makes it 0700; the cache entry is a normal directory
                try:
                    os.rename(tmp, final)
                except OSError:
                    # Another process (one not honouring the lock, e.g. on a filesystem without
                    # flock) won the race: keep theirs if it is complete.
                    if not is_complete(final, key, marker_file, required):
                        raise
            finally:
                if tmp.exists():
                    shutil.rmtree(tmp, ignore_errors=True)
        finally:
            fcntl.flock(lock.fileno(), fcntl.LOCK_UN)
    return final
