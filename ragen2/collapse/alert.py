"""Collapse alert: the probe panel stops seeing input dependence while held-out success stalls.

Which panel: the measurement of ``monitor.alert_instrument`` (:mod:`ragen2.collapse.instrument`):
the first-turn panel (``collapse/panel/mi_lo``, ``mi_floor``) or the later-turn panel at fixed
mid-episode states (``collapse/panel/turns/mi_lo``, ``mi_floor``); ``auto`` picks the later
turns wherever the env has them (FrozenLake, Sokoban), since a first turn whose observation carries
nothing the reasoning needs sits at the floor by construction and would alert on every run.

Rule (``monitor.alert_patience`` = K, ``monitor.alert_min_gain`` = g):

* a panel measurement is *below the floor* when its bootstrap lower bound ``mi_lo`` is at or
  under the permutation floor ``mi_floor`` (the null's 95th percentile): the panel cannot tell
  the reasoning from one that ignores the input; a measurement with no value (``mi_lo`` None:
  fewer than 2 panel prompts got any reasoning, or fewer than ``monitor.min_samples`` samples
  did, :mod:`ragen2.collapse.withhold`) counts as below it too: nothing shows input dependence;
* the alert fires when the last K measurements were all below the floor and held-out success
  *stalled* over them: with t the step of the first of the K, some evaluation after t exists and
  none scored more than g above the baseline, the best evaluation at or before t (or, when there
  is none, the first evaluation after t, which is then not compared with itself). Until an
  evaluation after t exists there is no evidence either way, and the alert waits for one (the
  window moves on with every new measurement below the floor).

After an alert the count restarts, so a run that stays collapsed alerts again K measurements
later. The state is JSON (saved with every checkpoint).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class CollapseAlert:
    patience: int
    min_gain: float = 0.0
    # (step, mi_lo, floor); None's for a measurement without a value (too few samples)
    below: list[tuple[int, float | None, float | None]] = field(default_factory=list)
    evals: list[tuple[int, float]] = field(default_factory=list)  # (step, held-out success)

    def observe_eval(self, step: int, success: float) -> None:
        self.evals.append((int(step), float(success)))

    def observe_panel(self, step: int, mi_lo: float | None, mi_floor: float | None) -> str | None:
        """Fold in one panel measurement (``None``'s: no value, too few samples with reasoning);
        the alert's evidence when it fires, else None."""
        if mi_lo is not None and mi_floor is not None and mi_lo > mi_floor:
            self.below = []
            return None
        if mi_lo is None or mi_floor is None:
            self.below.append((int(step), None, None))
        else:
            self.below.append((int(step), float(mi_lo), float(mi_floor)))
        self.below = self.below[-self.patience:]  # older measurements no longer matter
        if len(self.below) < self.patience:
            return None
        start = self.below[0][0]
        before = [s for st, s in self.evals if st <= start]
        inside = [(st, s) for st, s in self.evals if st > start]
        baseline = max(before) if before else (inside[0][1] if inside else None)
        compared = inside if before else inside[1:]
        if not compared:
            return None  # no held-out evaluation since the window began: wait for one
        if any(s > baseline + self.min_gain for _, s in compared):
            return None  # success still improves
        points = ", ".join(f"step {st}: no value (too few samples)" if lo is None else
                           f"step {st}: {lo:+.3f} <= {fl:+.3f}" for st, lo, fl in self.below)
        evals = ", ".join(f"{s:.3f} (step {st})" for st, s in compared)
        stall = f"held-out success {evals}: no gain above {baseline:.3f} + {self.min_gain:g}"
        self.below = []
        return (f"panel MI lower bound at or under the permutation floor for {self.patience} "
                f"measurements in a row ({points}); {stall}")

    def state_dict(self) -> dict[str, Any]:
        return {"below": [list(b) for b in self.below], "evals": [list(e) for e in self.evals]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.below = [(int(a), None if b is None else float(b), None if c is None else float(c))
                      for a, b, c in state["below"]]
        self.evals = [(int(a), float(b)) for a, b in state["evals"]]
