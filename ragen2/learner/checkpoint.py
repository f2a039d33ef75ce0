"""Atomic checkpoint directories: ``<run>/checkpoints/step_000010/`` plus a ``latest`` pointer.

A checkpoint is first written to ``step_XXXXXX.tmp-<pid>``, fsynced, then renamed into place; the
``latest`` file is replaced atomically afterwards. A crash at any moment leaves either the old
or the new checkpoint complete, never a half-written one that resume would pick.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

STATE_FILE = "trainer_state.json"


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


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_json_atomic(path: Path, payload: Any) -> None:
    tmp = path.with_name(path.name + f".tmp-{os.getpid()}")
    with open(tmp, "w") as f:
        json.dump(payload, f, indent=1, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def commit(tmp: Path, step: int, trainer_state: dict[str, Any]) -> Path:
    """Add the trainer state, fsync every file, rename into place and point ``latest`` at it."""
    write_json_atomic(tmp / STATE_FILE, trainer_state)
    for f in tmp.iterdir():
        with open(f, "rb") as fh:
            os.fsync(fh.fileno())
    _fsync_dir(tmp)
    final = tmp.parent / f"step_{step:06d}"
    if final.exists():  # an older run wrote this step: replace it
        shutil.rmtree(final)
    os.rename(tmp, final)
    _fsync_dir(tmp.parent)
    write_json_atomic(tmp.parent / "latest.json", {"step": step, "dir": final.name})
    return final


def latest(run_dir: str | Path) -> Path | None:
    """The newest complete checkpoint, or None. Temporary leftovers are ignored."""
    root = checkpoint_root(run_dir)
    pointer = root / "latest.json"
    if pointer.exists():
        target = root / json.loads(pointer.read_text())["dir"]
        if (target / STATE_FILE).exists():
            return target
    done = sorted(p for p in root.glob("step_*") if ".tmp" not in p.name and (p / STATE_FILE).exists())
    return done[-1] if done else None


def read_state(ckpt: Path) -> dict[str, Any]:
    return json.loads((ckpt / STATE_FILE).read_text())


def prune(run_dir: str | Path, keep: int) -> None:
    """Delete all but the newest ``keep`` complete checkpoints (and stale temporaries)."""
    root = checkpoint_root(run_dir)
    for p in root.glob("step_*.tmp-*"):
        shutil.rmtree(p, ignore_errors=True)
    done = sorted(p for p in root.glob("step_*") if ".tmp" not in p.name)
    for p in done[:-keep] if keep > 0 else []:
        shutil.rmtree(p, ignore_errors=True)
