"""Which MI measurement the collapse alert and the diagnosis read (``monitor.alert_instrument``).

=================  ===========================================  =================================
instrument         collapse alert (``alert.py``) reads          diagnosis (``diagnosis.py``) reads
=================  ===========================================  =================================
``first_turn``     ``collapse/panel/{mi_lo, mi_floor}``         ``collapse/{mi, mi_null, log_n,
                   (first-turn probe panel)                     mi_bound}`` (the batch monitor)
``later_turns``    ``collapse/panel/turns/{mi_lo, mi_floor}``   ``collapse/panel/turns/{mi,
                   (fixed mid-episode states, panel_turns.py)   mi_null, log_n, mi_bound}``
=================  ===========================================  =================================

Token entropy (the other half of template collapse) is the batch monitor's
``collapse/token_entropy`` for both. The rollback target (a checkpoint the panel measured
``healthy``) follows the instrument too.

``auto`` (the default) picks ``later_turns`` whenever the later-turn panel exists, i.e. the
training envs' episodes go on after ``monitor.panel_prefix_turns`` scripted turns and give at least
2 distinct mid-episode states; else ``first_turn``. The rationale: where episodes have more than
one turn, the later turn's context holds the first observation *and* the state reached, so its
MI can move wherever the first turn's can, and also where the first observation carries no
information the first reasoning needs. Per env (registered defaults, ``rollout.max_turns`` of the
presets):

* FrozenLake (``ragen2/FrozenLake-v0``): later turns. Start and goal never move, so every map's
  first reasoning is the same and the first-turn MI sits at its floor by construction.
* Sokoban (``ragen2/Sokoban-v0``): later turns (the first turn's MI can move too: boards differ).
* Math (``ragen2/Math-v0``): first turn. The expert answers correctly and ends the episode, and
  the env has no ``valid_actions`` to draw a wrong move from, so no opening keeps it going; the
  problem text is in the first observation.
* Countdown (``ragen2/Countdown-v0``): first turn (one answer ends the episode).
* Code (``ragen2/Code-v0``): first turn (the reference solution passes and ends the episode).
* EchoWord (``tests.reasoning_env:EchoWord-v0``, the test env): first turn (one turn).
* A mixture (``env.mix``): later turns when any training env gives later-turn prompts (the panel
  then holds only those envs' prompts).

An explicit ``later_turns`` without a later-turn panel is refused at start-up (the message names
why there is none).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ragen2.collapse.panel import PanelMeasurement

INSTRUMENTS = ("auto", "first_turn", "later_turns")

#: instrument -> the metric prefix the diagnosis reads its MI from
DIAGNOSIS_PREFIX = {"first_turn": "collapse/", "later_turns": "collapse/panel/turns/"}


def resolve_instrument(choice: str, later_turns_available: bool) -> str:
    """``first_turn`` or ``later_turns`` for ``monitor.alert_instrument`` = ``choice``."""
    if choice not in INSTRUMENTS:
        raise ValueError(f"monitor.alert_instrument={choice!r} is invalid; allowed: "
                         f"{', '.join(INSTRUMENTS)}")
    if choice == "auto":
        return "later_turns" if later_turns_available else "first_turn"
    if choice == "later_turns" and not later_turns_available:
        raise ValueError("monitor.alert_instrument=later_turns but there is no later-turn probe "
                         "panel: it needs monitor.panel_size > 0, monitor.panel_prefix_turns > 0, "
                         "rollout.max_turns > monitor.panel_prefix_turns and training envs whose "
                         "scripted opening keeps the episode going (a demonstration() hook; "
                         "single-turn envs have none): use auto or first_turn")
    return choice


def alert_measurement(instrument: str, first_turn: PanelMeasurement | None,
                      later_turns: PanelMeasurement | None) -> PanelMeasurement | None:
    """The panel measurement the alert and the rollback verdict read: the first-turn panel's or
    the later-turn panel's (None: that panel did not measure)."""
    if instrument not in ("first_turn", "later_turns"):
        raise ValueError(f"instrument {instrument!r} is unresolved; allowed: first_turn, later_turns")
    return first_turn if instrument == "first_turn" else later_turns


#: instrument -> the prefix of the grounding the diagnosis reads beside the MI (None: none; the
#: batch's first-turn grounding is not kept between evaluations)
GROUNDING_PREFIX = {"first_turn": None, "later_turns": "collapse/panel/turns/grounding/"}


def grounding_inputs(instrument: str, metrics: Mapping[str, float],
                     grounding_ref: float | None) -> dict[str, float | None]:
    """The ``grounding``, ``checkable`` and ``grounding_ref`` arguments of ``diagnose`` from the
    newest measurement of the instrument (empty for ``first_turn``, and all None on an env
    without a ``ground`` hook: the criterion is then skipped)."""
    p = GROUNDING_PREFIX[instrument]
    if p is None:
        return {}
    return {"grounding": metrics.get(p + "frac"), "checkable": metrics.get(p + "checkable_frac"),
            "grounding_ref": grounding_ref}


def diagnosis_inputs(instrument: str, metrics: Mapping[str, float]) -> dict[str, float | None]:
    """The ``mi``, ``mi_null``, ``log_n`` and ``mi_bound`` arguments of ``diagnose`` from the
    newest measurement of the instrument (``metrics``: its keys with their full prefix). A value
    the measurement withheld (fewer than ``monitor.min_samples`` samples) is None: the diagnosis
    then reports template collapse as not assessed, never as an MI of 0."""
    p = DIAGNOSIS_PREFIX[instrument]
    return {k: metrics.get(p + k) for k in ("mi", "mi_null", "log_n", "mi_bound")}
