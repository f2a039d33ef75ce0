"""Run diagnosis: each label, the precedence between them, boundaries and missing inputs."""

from __future__ import annotations

import math

import pytest

from ragen2.collapse import DIAGNOSIS_CODES, Diagnosis, DiagnosisThresholds, diagnose

LOG8 = math.log(8)  # 2.079442; default MI bar = 0.1 * 2.079442 = 0.207944
OK_MI = {"mi": 1.5, "mi_null": 0.05, "log_n": LOG8, "token_entropy": 1.0, "entropy_ref": 2.0}
OK_FIT = {"train_success": 0.8, "eval_success": 0.75}


def test_codes_are_distinct_integers():
    assert DIAGNOSIS_CODES == {"healthy": 0, "template_collapse": 1, "overfitting": 2, "underfitting": 3}


def test_healthy():
    # excess 1.45 >= 0.2079 ; gap .05 < .2 ; not both < .2
    d = diagnose(**OK_MI, **OK_FIT)
    assert isinstance(d, Diagnosis)
    assert (d.label, d.code, d.also) == ("healthy", 0, ())
    assert "\n" not in d.evidence and d.evidence.startswith("healthy: ")
    assert "MI 1.5 nats (null 0.05, bound 2.08; excess 1.45 >= 0.1 x 2.08)" in d.evidence


def test_template_collapse():
    # excess = 0.12 - 0.02 = 0.10 < 0.1 * 2.0794 = 0.2079 (low MI)
    # entropy 1.9 >= 0.8 * 2.0 = 1.6 (still high)
    d = diagnose(mi=0.12, mi_null=0.02, log_n=LOG8, token_entropy=1.9, entropy_ref=2.0, **OK_FIT)
    assert (d.label, d.code, d.also) == ("template_collapse", 1, ())
    assert "MI 0.12 nats (null 0.02, bound 2.08; excess 0.1 < 0.1 x 2.08)" in d.evidence
    assert "while token entropy 1.9 >= 0.8 x 2 at start" in d.evidence


def test_repeated_prompts_use_the_distinct_prompts_bound():
    """8 samples of 2 distinct prompts: MI can be at most log 2 = 0.693, not log 8. The same
    excess 0.10 is most of a 0.693 bound (>= 0.1 x 0.693 = 0.0693: healthy) but was judged
    against 0.1 x log 8 = 0.208 (template collapse)."""
    args = dict(mi=0.12, mi_null=0.02, log_n=LOG8, token_entropy=1.9, entropy_ref=2.0, **OK_FIT)
    assert diagnose(**args).label == "template_collapse"
    d = diagnose(**args, mi_bound=math.log(2))
    assert d.label == "healthy"
    assert "bound 0.693; excess 0.1 >= 0.1 x 0.693" in d.evidence
    with pytest.raises(ValueError, match="mi_bound"):
        diagnose(**args, mi_bound=0.0)


def test_low_mi_with_low_entropy_is_not_template_collapse():
    # entropy 1.0 < 1.6: the reasoning is not diverse -> not template collapse, but reported
    d = diagnose(mi=0.12, mi_null=0.02, log_n=LOG8, token_entropy=1.0, entropy_ref=2.0, **OK_FIT)
    assert d.label == "healthy"
    assert "low MI but not template collapse" in d.evidence and "1 < 0.8 x 2" in d.evidence


def test_null_is_subtracted():
    # mi 0.5 alone is above the bar 0.2079, but 0.5 - null 0.35 = 0.15 is below it
    args = dict(log_n=LOG8, token_entropy=1.9, entropy_ref=2.0, **OK_FIT)
    assert diagnose(mi=0.5, mi_null=0.35, **args).label == "template_collapse"
    assert diagnose(mi=0.5, mi_null=0.0, **args).label == "healthy"
    d = diagnose(mi=0.5, **args)  # null missing -> taken as 0, and said so
    assert d.label == "healthy" and "null not given, taken as 0" in d.evidence


def test_overfitting():
    # gap .9 - .5 = .4 >= .2 ; not both < .2
    d = diagnose(**OK_MI, train_success=0.9, eval_success=0.5)
    assert (d.label, d.code) == ("overfitting", 2)
    assert "success train 0.900, held-out 0.500 (not both < 0.2; gap 0.400 >= 0.2)" in d.evidence


def test_underfitting():
    # both .1, .05 < .2 ; gap .05 < .2
    d = diagnose(**OK_MI, train_success=0.1, eval_success=0.05)
    assert (d.label, d.code, d.also) == ("underfitting", 3, ())
    assert "both < 0.2; gap 0.050 < 0.2" in d.evidence


def test_precedence_template_over_fit_labels():
    d = diagnose(mi=0.1, mi_null=0.0, log_n=LOG8, token_entropy=2.0, entropy_ref=2.0,
                 train_success=0.9, eval_success=0.3)
    assert d.label == "template_collapse" and d.also == ("overfitting",)
    assert d.evidence.startswith("template_collapse (also overfitting): ")
    d = diagnose(mi=0.1, mi_null=0.0, log_n=LOG8, token_entropy=2.0, entropy_ref=2.0,
                 train_success=0.0, eval_success=0.0)
    assert d.label == "template_collapse" and d.also == ("underfitting",)


def test_precedence_underfitting_over_overfitting():
    # low bar .5: train .45 and eval .1 both below it; gap .35 >= .2 as well
    th = DiagnosisThresholds(underfit_success=0.5)
    d = diagnose(**OK_MI, train_success=0.45, eval_success=0.1, thresholds=th)
    assert d.label == "underfitting" and d.also == ("overfitting",)


def test_boundaries():
    # values exactly representable in binary, so the comparisons are exact:
    # MI bar = 0.25 * 2.0 = 0.5 ; excess 0.75 - 0.25 = 0.5 is NOT < 0.5 -> not low
    th = DiagnosisThresholds(mi_low_frac=0.25, entropy_high_frac=0.5, overfit_gap=0.25,
                             underfit_success=0.25)
    base = {"log_n": 2.0, "token_entropy": 1.0, "entropy_ref": 2.0, "thresholds": th}
    assert diagnose(mi=0.75, mi_null=0.25, **base).label == "healthy"
    # excess 0.4375 < 0.5 and entropy 1.0 >= 0.5 * 2.0 (equality counts as high)
    assert diagnose(mi=0.6875, mi_null=0.25, **base).label == "template_collapse"
    # gap .75 - .5 = .25 >= .25 -> overfitting ; .25 is not < .25 -> train not low
    assert diagnose(train_success=0.75, eval_success=0.5, thresholds=th).label == "overfitting"
    assert diagnose(train_success=0.25, eval_success=0.0, thresholds=th).label == "overfitting"
    assert diagnose(train_success=0.125, eval_success=0.0, thresholds=th).label == "underfitting"


def test_none_inputs_skip_criteria_and_say_so():
    d = diagnose()
    assert d.label == "healthy"
    assert "template collapse not assessed (missing mi, log_n, token_entropy, entropy_ref)" in d.evidence
    assert "over/underfitting not assessed (missing train_success, eval_success)" in d.evidence
    # monitor off but fit known: fit labels still work
    d = diagnose(train_success=0.9, eval_success=0.2, token_entropy=1.9, entropy_ref=2.0)
    assert d.label == "overfitting" and "missing mi, log_n" in d.evidence
    # MI known, entropy reference unknown: the MI numbers are still shown
    d = diagnose(mi=0.01, log_n=LOG8, token_entropy=1.9, train_success=0.9)
    assert d.label == "healthy"
    assert "missing entropy_ref): MI 0.01 nats" in d.evidence
    assert "missing eval_success" in d.evidence


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"mi": float("nan")}, r"mi must be finite"),
        ({"log_n": 0.0}, r"log_n must be > 0"),
        ({"entropy_ref": -1.0}, r"entropy_ref must be > 0"),
        ({"token_entropy": -0.1}, r"token_entropy must be >= 0"),
        ({"train_success": 1.5}, r"train_success must be in \[0, 1\]"),
        ({"eval_success": "high"}, r"eval_success must be a number or None"),
        ({"thresholds": {"mi_low_frac": 0.1}}, r"DiagnosisThresholds"),
    ],
)
def test_invalid_inputs(kwargs, match):
    with pytest.raises(ValueError, match=match):
        diagnose(**kwargs)


@pytest.mark.parametrize("field", ["mi_low_frac", "entropy_high_frac", "overfit_gap", "underfit_success",
                                   "grounding_drop", "checkable_min"])
@pytest.mark.parametrize("value", [0.0, -0.1, 1.5, float("nan")])
def test_invalid_thresholds(field, value):
    with pytest.raises(ValueError, match=rf"DiagnosisThresholds.{field} must be a number in \(0, 1\]"):
        DiagnosisThresholds(**{field: value})


def test_grounding_that_fell_is_template_collapse_while_the_mi_stays_high():
    """Collapse study 3's second kind: the MI is healthy (excess 1.45 >= 0.208) but the env's
    check says the reasoning states a wrong state: 0.99 -> 0.25 fell 0.74 >= 0.2, checkable
    0.98 >= 0.8."""
    d = diagnose(**OK_MI, **OK_FIT, grounding=0.25, grounding_ref=0.99, checkable=0.98)
    assert (d.label, d.code) == ("template_collapse", 1)
    assert ("template collapse by the env's check: the reasoning states a wrong state: "
            "grounding 0.25 (0.99 at start: fell 0.74 >= 0.2), checkable 0.98 >= 0.8") in d.evidence
    assert "excess 1.45 >= 0.1 x 2.08" in d.evidence  # the MI part says it is high


@pytest.mark.parametrize("grounding, checkable, why", [
    (0.85, 0.98, "fell 0.14 < 0.2"),  # a small fall
    (0.25, 0.6, "checkable 0.6 < 0.8"),  # most reasoning no longer states a state: not a template
])
def test_grounding_criterion_needs_both_a_fall_and_checkable_reasoning(grounding, checkable, why):
    d = diagnose(**OK_MI, **OK_FIT, grounding=grounding, grounding_ref=0.99, checkable=checkable)
    assert d.label == "healthy" and why in d.evidence


def test_grounding_at_the_boundary_and_missing_parts():
    # exactly the drop and exactly the checkable share hold (>=): 0.9 - 0.7 = 0.2 in binary
    # floating point is 0.20000000000000007, so use values that subtract exactly
    d = diagnose(**OK_MI, grounding=0.5, grounding_ref=0.75, checkable=0.8,
                 thresholds=DiagnosisThresholds(grounding_drop=0.25))
    assert d.label == "template_collapse"
    d = diagnose(**OK_MI, grounding=0.25)
    assert d.label == "healthy"
    assert "grounding not assessed (missing grounding_ref, checkable)" in d.evidence
    d = diagnose(**OK_MI)  # an env without a ground hook: nothing said about grounding
    assert "grounding" not in d.evidence
    with pytest.raises(ValueError, match=r"grounding must be in \[0, 1\], got 1.2"):
        diagnose(grounding=1.2)
