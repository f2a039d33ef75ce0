"""Saved rollouts: each step's unfiltered batch as compressed JSON lines, bounded in total size.

``RUN_DIR/rollouts/step_000001.jsonl.gz``, one line per episode: ``step``, ``group_id``, ``env``,
``env_seed``, ``prompt`` (first observation), ``reasoning`` (first-turn ``<think>`` text),
``responses``, ``actions`` (the parsed ``<answer>`` per turn, null when unparsable), ``reward``,
``success``, ``kept`` (survived the group filter), ``env_error``, ``policy_version`` (the
policy that generated it: older than the learner's under ``trainer.max_staleness``) and, where
the env has a ``ground`` hook, ``grounding`` (per turn, the share of the reasoning's claims about
the state that are true, null where nothing was checkable: ``ragen2.collapse.grounding``). Files are written atomically;
the oldest are deleted once the directory exceeds its size budget. ``ragen2-analyze`` reads them.

Evaluation outcomes: ``RUN_DIR/evaluations/step_000000.jsonl`` (and ``OUT/outcomes.jsonl`` of
``ragen2 eval``), one small line per held-out episode (``env``, ``env_seed``, ``reward``,
``success``, ``env_error``), every episode, so two evaluations on the same held-out seeds can be
compared problem by problem (a paired interval: ``ragen2.analysis.run_stats.paired_difference``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Collection, Sequence

import numpy as np

from ragen2.atomic import atomic_write
from ragen2.rollout.parsing import parse_response
from ragen2.rollout.trajectory import Trajectory

MAX_TEXT = 4000  # characters kept of any one prompt / response


def _cap(text: str | None) -> str | None:
    return None if text is None else text[:MAX_TEXT]


def episode_record(t: Trajectory, step: int, kept: bool, eos_text: str | None = None) -> dict:
    record = {"step": step, "group_id": t.group_id, "env": t.env_name, "env_seed": t.env_seed,
              "prompt": _cap(t.observations[0] if t.observations else None),
              "reasoning": _cap(t.first_think),
              "responses": [_cap(r) for r in t.responses],
              "actions": [_cap(parse_response(r, eos_text).answer) for r in t.responses],
              "reward": t.reward, "success": t.success, "kept": kept, "env_error": t.env_error,
              "policy_version": t.policy_version}
    if t.grounding is not None:  # the env's ground hook: per turn, the share of true claims
        record["grounding"] = list(t.grounding)
    return record


def save_rollouts(run_dir: Path, step: int, trajs: Sequence[Trajectory],
                  kept_groups: Collection[int], max_mb: float, eos_text: str | None = None) -> Path:
    """Write one step's batch; returns the file. Prunes the oldest files beyond ``max_mb``."""
    folder = Path(run_dir) / "rollouts"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"step_{step:06d}.jsonl.gz"
    with atomic_write(path, "w", compress=True) as f:
        for t in trajs:
            f.write(json.dumps(episode_record(t, step, t.group_id in kept_groups, eos_text)) + "\n")
    files = sorted(folder.glob("step_*.jsonl.gz"))
    total = sum(p.stat().st_size for p in files)
    while files and total > max_mb * 2**20 and len(files) > 1:
        oldest = files.pop(0)
        total -= oldest.stat().st_size
        oldest.unlink()
    return path


def spread(trajs: Sequence[Trajectory], n: int) -> list[Trajectory]:
    """``n`` trajectories spread evenly over the list (so every env of a mixture shows up): the
    episodes a samples file shows."""
    if n <= 0 or not trajs:
        return []
    idx = np.unique(np.linspace(0, len(trajs) - 1, min(n, len(trajs))).round().astype(int))
    return [trajs[i] for i in idx]


def outcome_record(t: Trajectory) -> dict:
    return {"env": t.env_name, "env_seed": t.env_seed, "reward": t.reward,
            "success": bool(t.success), "env_error": t.env_error}


def save_outcomes(path: Path, trajs: Sequence[Trajectory]) -> Path:
    """Write every episode's outcome (:func:`outcome_record`) to ``path`` atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(path, "w") as f:
        for t in trajs:
            f.write(json.dumps(outcome_record(t)) + "\n")
    return path


def load_outcomes(path: Path) -> dict[tuple[str, int], float]:
    """``{(env, env_seed): success as 0.0 / 1.0}`` of an outcomes file (episodes with an env error
    left out)."""
    out: dict[tuple[str, int], float] = {}
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            if r["env_error"] is None:
                out[(r["env"], int(r["env_seed"]))] = float(r["success"])
    return out
