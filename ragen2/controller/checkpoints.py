"""The run's checkpoints: written atomically after a step (the learner's shards, the batches
generated ahead, the run state with every component's state), pruned to
``trainer.keep_checkpoints`` with the rollback target kept, and searched for the newest one whose
weights the panel measured healthy (:mod:`ragen2.learner.checkpoint` holds the file layout)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from ragen2.config import Config
from ragen2.learner import checkpoint
from ragen2.run_state import PanelVerdict, RunState


class Checkpoints:
    """``learners`` write their shards; ``rollouts`` the queue of batches generated ahead."""

    def __init__(self, cfg: Config, run_dir: Path, learners: Any, rollouts: Any) -> None:
        self.cfg, self.run_dir, self.learners, self.rollouts = cfg, run_dir, learners, rollouts

    def save(self, step: int, state: RunState, version: int) -> Path:
        """Write the checkpoint of ``step`` (the learner at policy ``version``) atomically.

        On any failure the temporary directory is removed (as far as the disk allows); a write
        error (disk full, read-only, ...) here or on a learner rank becomes
        :class:`checkpoint.CheckpointWriteError`. The previous checkpoint and ``latest.json`` stay.
        """
        tmp = None
        try:
            tmp = checkpoint.begin(self.run_dir, step)
            self.learners.save(str(tmp))
            self.rollouts.save(tmp)  # bounded staleness: the batches generated ahead (none at k = 0)
            final = checkpoint.commit(
                tmp, step, replace(state, step=step, policy_version=version).to_dict())
        except BaseException as e:
            if tmp is not None:
                checkpoint.discard(tmp)
            if not isinstance(e, OSError):  # (a rank's OSError comes back from Ray as one too)
                raise
            prev = checkpoint.latest(self.run_dir)
            raise checkpoint.CheckpointWriteError(
                f"writing the step {step} checkpoint into {checkpoint.checkpoint_root(self.run_dir)} "
                f"failed: {getattr(e, 'cause', e)}; " +
                (f"the previous checkpoint {prev.name} is intact: free space (or fix permissions) "
                 "and rerun with trainer.resume=true" if prev else "there is no earlier checkpoint")
            ) from e
        protect = []
        if self.cfg.monitor.on_collapse == "rollback" and (h := self.healthy()):
            protect.append(h)  # the rollback target outlives keep_checkpoints
        checkpoint.prune(self.run_dir, self.cfg.trainer.keep_checkpoints, protect)
        return final

    def healthy(self) -> Path | None:
        """The newest checkpoint whose own weights the panel measured healthy (its MI interval
        cleared the floor at the step the checkpoint was written)."""
        for ckpt in reversed(checkpoint.complete(self.run_dir)):
            try:
                state = RunState.from_dict(checkpoint.read_state(ckpt))
                verdict = PanelVerdict.from_dict((state.controller or {}).get("panel"))
            except (OSError, ValueError, KeyError, TypeError):
                continue
            if verdict is not None and verdict.healthy and verdict.step == state.step:
                return ckpt
        return None
