"""Atomic checkpoint directories: ``<run>/checkpoints/step_000010/`` plus a ``latest`` pointer.

A checkpoint is first written to ``step_XXXXXX.tmp-<pid>``, fsynced, then renamed into place; the
``latest`` file is replaced atomically afterwards. A crash at any moment leaves either the old
or the new checkpoint complete, never a half-written one that resume would pick: only a
``step_XXXXXX`` directory whose trainer state parses counts, a damaged ``latest.json`` falls back to
scanning, and a directory being replaced or pruned loses its trainer state first.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any, Collection

from ragen2 import atomic

STATE_FILE = "trainer_state.json"
_NAME = re.compile(r"step_\d{6,}")


class CheckpointWriteError(RuntimeError):
    """Writing a checkpoint failed (disk full, read-only, ...); the previous one is intact."""


def checkpoint_root(run_dir: str | Path) -> Path:
    return Path(run_dir) / "checkpoints"


def begin(run_dir: str | Path, step: int) -> Path:
    """Create and return a fresh temporary directory for the checkpoint of ``step``."""
    root = checkpoint_root(run_dir)
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / f"step_{step:06d}.tmp-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    return tmp


def discard(tmp: Path) -> None:
    """Remove an unfinished temporary checkpoint, as far as possible (a full disk may refuse)."""
    shutil.rmtree(tmp, ignore_errors=True)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_json_atomic(path: Path, payload: Any) -> None:
    """``payload`` as indented, key-sorted JSON at ``path``, atomically (:mod:`ragen2.atomic`)."""
    atomic.write_json(path, payload, indent=1, sort_keys=True)


def commit(tmp: Path, step: int, trainer_state: dict[str, Any]) -> Path:
    """Add the trainer state, fsync every file (the sharded parts' directories included), rename
    into place and point ``latest`` at it."""
    write_json_atomic(tmp / STATE_FILE, trainer_state)
    for f in sorted(tmp.rglob("*"), reverse=True):  # files, and the shard directories after
        if f.is_dir():
            _fsync_dir(f)
            continue
        with open(f, "rb") as fh:
            os.fsync(fh.fileno())
    _fsync_dir(tmp)
    final = tmp.parent / f"step_{step:06d}"
    old = None
    if final.exists():  # an older run wrote this step: move it aside (atomic), delete it after
        old = final.with_name(f"{final.name}.tmp-old-{os.getpid()}")
        os.rename(final, old)
    os.rename(tmp, final)
    _fsync_dir(tmp.parent)
    write_json_atomic(tmp.parent / "latest.json", {"step": step, "dir": final.name})
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    return final


def _complete(ckpt: Path) -> bool:
    """A renamed-into-place checkpoint whose trainer state parses."""
    if not _NAME.fullmatch(ckpt.name):
        return False
    try:
        return isinstance(json.loads((ckpt / STATE_FILE).read_text()), dict)
    except (OSError, ValueError):
        return False


def latest(run_dir: str | Path) -> Path | None:
    """The newest complete checkpoint, or None. Temporary leftovers are ignored; a missing,
    damaged or dangling ``latest.json`` falls back to the newest complete ``step_*`` directory."""
    root = checkpoint_root(run_dir)
    try:
        target = root / json.loads((root / "latest.json").read_text())["dir"]
        if target.parent == root and _complete(target):
            return target
    except (OSError, ValueError, KeyError, TypeError):
        pass
    done = sorted((p for p in root.glob("step_*") if _complete(p)), key=lambda p: int(p.name[5:]))
    return done[-1] if done else None


def complete(run_dir: str | Path) -> list[Path]:
    """Every complete checkpoint, oldest first."""
    root = checkpoint_root(run_dir)
    return sorted((p for p in root.glob("step_*") if _complete(p)), key=lambda p: int(p.name[5:]))


def read_state(ckpt: Path) -> dict[str, Any]:
    return json.loads((ckpt / STATE_FILE).read_text())


def prune(run_dir: str | Path, keep: int, protect: Collection[Path] = ()) -> None:
    """Delete all but the newest ``keep`` complete checkpoints (and stale temporaries); those in
    ``protect`` (the collapse rollback's target) are kept besides.

    A pruned checkpoint loses its trainer state first, so a crash mid-deletion leaves nothing
    that :func:`latest` would take for complete."""
    root = checkpoint_root(run_dir)
    for p in root.glob("step_*.tmp-*"):
        shutil.rmtree(p, ignore_errors=True)
    done = sorted((p for p in root.glob("step_*") if _NAME.fullmatch(p.name)),
                  key=lambda p: int(p.name[5:]))
    kept = {Path(p).resolve() for p in protect}
    for p in done[:-keep] if keep > 0 else []:
        if p.resolve() in kept:
            continue
        (p / STATE_FILE).unlink(missing_ok=True)
        shutil.rmtree(p, ignore_errors=True)
