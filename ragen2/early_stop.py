"""Early stops a run can ask for (``trainer.early_stop``), each off by default.

* **Reward spread gone**: the mean in-group reward spread σ̄ (``rollout/in_group_reward_std``)
  below ``spread_frac`` x its value at the first RL step for ``spread_patience`` steps in a row.
  The groups no longer differ, so the task gradient has faded (the signal the SNR filter needs).
* **Held-out success floor**: held-out success below ``eval_floor`` for ``eval_patience``
  evaluations in a row (the evaluation before RL does not count).

:class:`EarlyStop` is a pure state machine; its state is JSON, saved with each checkpoint so a
resumed run counts on exactly where it stopped counting.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass
class EarlyStop:
    spread_frac: float = 0.0  # 0 = off
    spread_patience: int = 5
    eval_floor: float = 0.0  # 0 = off
    eval_patience: int = 3
    start_spread: float | None = None
    low_spread_steps: int = 0
    low_evals: int = 0

    def step(self, spread: float) -> str | None:
        """Fold in one RL step's mean in-group reward spread; the reason to stop, or None."""
        if self.spread_frac <= 0:
            return None
        if self.start_spread is None:
            self.start_spread = float(spread)
            return None
        bar = self.spread_frac * self.start_spread
        self.low_spread_steps = self.low_spread_steps + 1 if spread < bar else 0
        if self.low_spread_steps >= self.spread_patience:
            return (f"the in-group reward spread stayed below {self.spread_frac:g} x its first-step "
                    f"value {self.start_spread:.4g} (= {bar:.4g}) for {self.low_spread_steps} steps "
                    "(trainer.early_stop.spread_frac): the groups' rewards no longer differ")
        return None

    def evaluation(self, success: float) -> str | None:
        """Fold in one held-out evaluation (after RL started); the reason to stop, or None."""
        if self.eval_floor <= 0:
            return None
        self.low_evals = self.low_evals + 1 if success < self.eval_floor else 0
        if self.low_evals >= self.eval_patience:
            return (f"held-out success stayed below {self.eval_floor:g} for {self.low_evals} "
                    "evaluations (trainer.early_stop.eval_floor)")
        return None

    def state_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items()
                if k in ("start_spread", "low_spread_steps", "low_evals")}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for k, v in state.items():
            setattr(self, k, v)
