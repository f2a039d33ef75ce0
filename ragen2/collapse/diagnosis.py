"""Classify a run at an evaluation: healthy, template collapse, overfitting or underfitting.

The design document's section 6 table:

    =================  ===========================  ==========================  ===================
                       template collapse            overfitting                 underfitting
    what it looks like input-blind fixed patterns   train good, held-out bad    both bad
    detected by        low mutual information       train vs held-out gap       low success overall
    fix                SNR-aware filtering          regularisation / data       more capacity
    =================  ===========================  ==========================  ===================

Criteria (thresholds in ``DiagnosisThresholds``):
    template_collapse: mi_excess < mi_low_frac * bound   with mi_excess = mi - mi_null, bound =
                       mi_bound (distinct prompts) if given, else log_n
                       (mi_null = 0 when not given), AND token_entropy >= entropy_high_frac *
                       entropy_ref (entropy_ref = token entropy at the start of RL).
                       Low MI with LOW entropy is not template collapse (the reasoning is not
                       diverse); it is reported in the evidence but not labelled.
                       OR, where the env checks the reasoning against its true state (its
                       ``ground`` hook): grounding_ref - grounding >= grounding_drop AND
                       checkable >= checkable_min (the reasoning still states a state, no
                       longer the true one). Collapse study 3 found both kinds: reasoning that
                       became one sentence (low MI), and reasoning that still depends on its
                       input but states the wrong position, where MI and the one-coordinate
                       contrasts stay high and only the env's check sees it.
    underfitting:      train_success < underfit_success AND eval_success < underfit_success.
    overfitting:       train_success - eval_success >= overfit_gap.

Which MI: the trainer passes the measurement of ``monitor.alert_instrument``
(:mod:`ragen2.collapse.instrument`): the batch monitor's first turn (``collapse/mi``, ``mi_null``,
``mi_bound``) or the later-turn probe panel (``collapse/panel/turns/mi``, ``mi_null``,
``mi_bound``) on multi-turn envs (``auto``), where the first turn's MI cannot move.

Precedence when several hold: template_collapse > underfitting > overfitting > healthy.
Template collapse comes first because it is the most specific finding and it explains the other
two (input-blind reasoning generalises badly, and a collapsed policy can also fail everywhere);
underfitting beats overfitting because a gap between two low success rates means the policy has
not learned the training tasks either. Every other criterion that holds is listed in ``also`` and
in the evidence. ``healthy`` means no criterion that could be assessed holds; criteria whose
inputs are None are skipped and named in the evidence as "not assessed".
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

__all__ = ["DIAGNOSIS_CODES", "Diagnosis", "DiagnosisThresholds", "diagnose"]

# Integer per label, logged as the metric ``collapse/diagnosis``.
DIAGNOSIS_CODES: dict[str, int] = {
    "healthy": 0,
    "template_collapse": 1,
    "overfitting": 2,
    "underfitting": 3,
}
_PRECEDENCE = ("template_collapse", "underfitting", "overfitting")


@dataclass(frozen=True)
class DiagnosisThresholds:
    """Thresholds of ``diagnose`` (all validated on construction).

    mi_low_frac: MI is low when mi - mi_null < mi_low_frac * bound (the fraction of the MI upper
        bound that the reasoning still carries about the prompt: the distinct prompts' bound
        ``mi_bound`` when given, else log N), in (0, 1]. Default 0.1.
    entropy_high_frac: token entropy is high when >= entropy_high_frac * entropy at the start of
        RL, in (0, 1]. Default 0.8 (entropy has kept at least 80 % of its starting value).
    overfit_gap: overfitting when train_success - eval_success >= overfit_gap, in (0, 1].
        Default 0.2 (success rates are in [0, 1]).
    underfit_success: underfitting when train and eval success are both < underfit_success,
        in (0, 1]. Default 0.2.
    grounding_drop: the grounded share (reasonings stating their true state) fell by at least
        this from its value at the start of RL, in (0, 1]. Default 0.2 (collapse study 3's rule).
    checkable_min: ... while at least this share of the reasonings still states a checkable
        state, in (0, 1]. Default 0.8 (study 3's rule: the text is not noise).
    """

    mi_low_frac: float = 0.1
    entropy_high_frac: float = 0.8
    overfit_gap: float = 0.2
    underfit_success: float = 0.2
    grounding_drop: float = 0.2
    checkable_min: float = 0.8

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not (0.0 < v <= 1.0):
                raise ValueError(f"DiagnosisThresholds.{f.name} must be a number in (0, 1], got {v!r}")


@dataclass(frozen=True)
class Diagnosis:
    """label: one of DIAGNOSIS_CODES; evidence: one line with the numbers; code: the label's
    integer; also: the other labels whose criteria hold too (lower precedence)."""

    label: str
    evidence: str
    code: int
    also: tuple[str, ...] = ()


def _check(name: str, v, *, lo: float | None = None, hi: float | None = None, positive=False):
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        try:
            v = float(v)  # 0-d tensors / numpy scalars
        except (TypeError, ValueError):
            raise ValueError(f"{name} must be a number or None, got {type(v).__name__}") from None
    v = float(v)
    if not math.isfinite(v):
        raise ValueError(f"{name} must be finite or None (None = not available), got {v}")
    if positive and v <= 0:
        raise ValueError(f"{name} must be > 0, got {v}")
    if hi is not None and (v < lo or v > hi):
        raise ValueError(f"{name} must be in [{lo:g}, {hi:g}], got {v}")
    if lo is not None and v < lo:
        raise ValueError(f"{name} must be >= {lo:g}, got {v}")
    return v


def _g(x: float) -> str:
    return f"{x:.3g}"


def diagnose(
    *,
    mi: float | None = None,
    mi_null: float | None = None,
    log_n: float | None = None,
    mi_bound: float | None = None,
    token_entropy: float | None = None,
    entropy_ref: float | None = None,
    train_success: float | None = None,
    eval_success: float | None = None,
    grounding: float | None = None,
    grounding_ref: float | None = None,
    checkable: float | None = None,
    thresholds: DiagnosisThresholds = DiagnosisThresholds(),
) -> Diagnosis:
    """Label the run from the latest monitor, entropy and success numbers (see module docstring).

    Args (all optional; None = not available, the criteria needing it are skipped):
        mi: MI estimate in nats (``mutual_information(...)["mi"]``).
        mi_null: its permutation floor (``permutation_null(...)["mi_null"]``); None -> 0.
        log_n: the MI upper bound log N (> 0), N the scored samples.
        mi_bound: the bound of the distinct prompts (``mutual_information(...)["mi_bound"]``,
            below log N when prompts repeat in the batch); used instead of ``log_n`` when given.
        token_entropy: current mean token entropy of the policy (>= 0).
        entropy_ref: token entropy at the start of RL (> 0).
        train_success, eval_success: success rates in [0, 1] on training / held-out tasks.
        grounding: the share of checkable reasonings that state their true state, in [0, 1]
            (the env's ``ground`` hook; None where the env has none).
        grounding_ref: the same at the start of RL, in [0, 1].
        checkable: the share of reasonings the env could check, in [0, 1].
        thresholds: a DiagnosisThresholds.
    Returns:
        Diagnosis(label, evidence, code, also).
    Raises:
        ValueError: a non-finite or out-of-range input, or thresholds of the wrong type.
    """
    if not isinstance(thresholds, DiagnosisThresholds):
        raise ValueError(f"thresholds must be a DiagnosisThresholds, got {type(thresholds).__name__}")  # noqa: TRY004
    t = thresholds
    mi = _check("mi", mi)
    mi_null = _check("mi_null", mi_null)
    log_n = _check("log_n", log_n, positive=True)
    mi_bound = _check("mi_bound", mi_bound, positive=True)
    bound_name = "mi_bound" if mi_bound is not None else "log_n"
    bound = mi_bound if mi_bound is not None else log_n
    token_entropy = _check("token_entropy", token_entropy, lo=0.0)
    entropy_ref = _check("entropy_ref", entropy_ref, positive=True)
    train_success = _check("train_success", train_success, lo=0.0, hi=1.0)
    eval_success = _check("eval_success", eval_success, lo=0.0, hi=1.0)
    grounding = _check("grounding", grounding, lo=0.0, hi=1.0)
    grounding_ref = _check("grounding_ref", grounding_ref, lo=0.0, hi=1.0)
    checkable = _check("checkable", checkable, lo=0.0, hi=1.0)

    holds: set[str] = set()
    parts: list[str] = []

    # ---- template collapse: MI low while token entropy stays high ----
    missing = [k for k, v in (("mi", mi), (bound_name, bound), ("token_entropy", token_entropy),
                              ("entropy_ref", entropy_ref)) if v is None]
    mi_text = None
    if mi is not None and bound is not None:
        null_used = 0.0 if mi_null is None else mi_null
        excess = mi - null_used
        mi_bar = t.mi_low_frac * bound
        mi_low = excess < mi_bar
        null_txt = "null not given, taken as 0" if mi_null is None else f"null {_g(mi_null)}"
        mi_text = (
            f"MI {_g(mi)} nats ({null_txt}, bound {_g(bound)}; excess {_g(excess)} "
            f"{'<' if mi_low else '>='} {_g(t.mi_low_frac)} x {_g(bound)})"
        )
    if missing:
        parts.append(
            "template collapse not assessed (missing " + ", ".join(missing) + ")"
            + (f": {mi_text}" if mi_text else "")
        )
    else:
        ent_bar = t.entropy_high_frac * entropy_ref
        ent_high = token_entropy >= ent_bar
        ent_text = (
            f"token entropy {_g(token_entropy)} {'>=' if ent_high else '<'} "
            f"{_g(t.entropy_high_frac)} x {_g(entropy_ref)} at start"
        )
        if mi_low and ent_high:
            holds.add("template_collapse")
            parts.append(f"template collapse: {mi_text} while {ent_text}")
        elif mi_low:
            parts.append(f"low MI but not template collapse: {mi_text} but {ent_text} "
                         "(reasoning not diverse: low-entropy collapse)")
        else:
            parts.append(f"{mi_text}; {ent_text}")

    # ---- template collapse seen by the env's check: the reasoning states the wrong state ----
    given = {"grounding": grounding, "grounding_ref": grounding_ref, "checkable": checkable}
    if all(v is not None for v in given.values()):
        drop = grounding_ref - grounding
        fell, fluent = drop >= t.grounding_drop, checkable >= t.checkable_min
        g_text = (f"grounding {_g(grounding)} ({_g(grounding_ref)} at start: fell {_g(drop)} "
                  f"{'>=' if fell else '<'} {_g(t.grounding_drop)}), checkable {_g(checkable)} "
                  f"{'>=' if fluent else '<'} {_g(t.checkable_min)}")
        if fell and fluent:
            holds.add("template_collapse")
            parts.append(f"template collapse by the env's check: the reasoning states a wrong "
                         f"state: {g_text}")
        else:
            parts.append(g_text)
    elif any(v is not None for v in given.values()):
        parts.append("grounding not assessed (missing "
                     + ", ".join(k for k, v in given.items() if v is None) + ")")

    # ---- fit: underfitting / overfitting ----
    if train_success is None or eval_success is None:
        miss = [k for k, v in (("train_success", train_success), ("eval_success", eval_success))
                if v is None]
        parts.append("over/underfitting not assessed (missing " + ", ".join(miss) + ")")
    else:
        gap = train_success - eval_success
        under = train_success < t.underfit_success and eval_success < t.underfit_success
        over = gap >= t.overfit_gap
        if under:
            holds.add("underfitting")
        if over:
            holds.add("overfitting")
        lvl = f"{'both <' if under else 'not both <'} {_g(t.underfit_success)}"
        parts.append(
            f"success train {train_success:.3f}, held-out {eval_success:.3f} ({lvl}; gap "
            f"{gap:.3f} {'>=' if over else '<'} {_g(t.overfit_gap)})"
        )

    ranked = [lab for lab in _PRECEDENCE if lab in holds]
    label = ranked[0] if ranked else "healthy"
    also = tuple(ranked[1:])
    head = label + (f" (also {', '.join(also)})" if also else "")
    evidence = f"{head}: " + "; ".join(parts)
    return Diagnosis(label=label, evidence=evidence, code=DIAGNOSIS_CODES[label], also=also)
