"""Pre-registered hypotheses evaluated on a study (ragen2.analysis.hypotheses): effects computed by
hand on small synthetic studies, and the verdict each interval gets."""

from __future__ import annotations

import math

import pytest

from ragen2.analysis.hypotheses import Change, Ratio, Tracks, evaluate, run_change, run_mean

PANEL = "collapse/panel/turns/mi"
ENT = "collapse/token_entropy"
SUCCESS = "eval/success"
STEP = "timing/step_s"


def _run(**series):
    """{step: {key: value}} from key=[(step, value), ...]."""
    out: dict[int, dict] = {}
    for key, points in series.items():
        for step, v in points:
            out.setdefault(step, {})[key.replace("__", "/")] = v
    return out


def _panel(values, steps=(0, 5, 10)):
    return list(zip(steps, values))


def test_run_change_is_the_mean_of_the_last_points_minus_the_first():
    m = _run(**{"collapse__panel__turns__mi": [(0, 1.5), (5, 1.0), (10, 0.6), (15, 0.4)]})
    assert run_change(m, "panel_turns_mi") == pytest.approx((0.6 + 0.4) / 2 - 1.5)
    assert run_change(m, "panel_turns_mi", final_points=1) == pytest.approx(0.4 - 1.5)
    assert run_change(m, "panel_turns_mi", final_points=3) == pytest.approx(2.0 / 3 - 1.5)
    assert run_change(m, "panel_turns_mi", final_points=4) is None  # no initial point left
    with pytest.raises(ValueError, match="final_points"):
        run_change(m, "panel_turns_mi", final_points=0)


def test_run_mean_skips_the_monitor_steps():
    m = _run(timing__step_s=[(1, 2.0), (2, 4.0), (5, 100.0), (6, 3.0), (10, 50.0)])
    assert run_mean(m, "step_s", skip_every=5) == pytest.approx(3.0)
    assert run_mean(m, "step_s") == pytest.approx((2 + 4 + 100 + 3 + 50) / 5)
    assert run_mean({}, "step_s") is None


def test_paired_change_against_a_baseline_by_hand():
    # seed 0: ent falls 1.6 -> mean(0.4, 0.2) = 0.3 (change -1.3); none 1.6 -> 1.5 (change -0.1)
    # seed 1: ent 1.4 -> 0.9 (-0.5); none 1.4 -> 1.6 (+0.2); paired d = [-1.2, -0.7]
    study = {("none_ent", 0): _run(collapse__panel__turns__mi=_panel([1.6, 0.4, 0.2])),
             ("none", 0): _run(collapse__panel__turns__mi=_panel([1.6, 1.5, 1.5])),
             ("none_ent", 1): _run(collapse__panel__turns__mi=_panel([1.4, 0.9, 0.9])),
             ("none", 1): _run(collapse__panel__turns__mi=_panel([1.4, 1.6, 1.6])),
             ("none", 2): _run(collapse__panel__turns__mi=_panel([1.0, 1.0, 1.0]))}  # unpaired
    h = Change("H1a", "MI falls", arm="none_ent", baseline="none", metric="panel_turns_mi",
               direction="negative")
    r = evaluate(study, h)
    assert r["per_unit"] == pytest.approx({0: -1.2, 1: -0.7})
    assert r["effect"] == pytest.approx(-0.95) and r["n"] == 2 and r["n_below"] == 2
    assert r["lo"] == pytest.approx(-1.2) and r["hi"] == pytest.approx(-0.7)
    assert r["verdict"] == "supported"
    assert r["dropped"] == {"none/2": "no none_ent run of seed 2"}
    assert evaluate(study, Change("x", "", "none_ent", "panel_turns_mi", "positive", "none")
                    )["verdict"] == "contradicted"


def test_runs_without_a_value_are_named_with_the_reason():
    # the bonus arm's instrument stops logging after step 5 (no reasoning left to score): its
    # change needs 3 points, so every seed drops out and the verdict says "no data" -- with why
    key = "collapse/turns/retrieval_acc@1"
    study = {("none_ent", s): {1: {key: 0.6}, 5: {key: 0.3}} for s in (0, 1)}
    study[("none", 0)] = {st: {key: 0.6} for st in (1, 5, 10)}  # has a value; its pair has none
    r = evaluate(study, Change("H1b", "", "none_ent", "turns_retrieval", "negative", "none"))
    assert r["verdict"] == "no data" and r["n"] == 0
    why = "2 logged value(s) of turns_retrieval, the last at step 5; the change needs 3"
    assert r["dropped"] == {"none_ent/0": why, "none_ent/1": why}
    own = evaluate({("none_ent", 0): {}}, Change("H1c", "", "none_ent", "token_entropy", "negative"))
    assert own["dropped"] == {"none_ent/0": "0 logged value(s) of token_entropy; the change needs 3"}


def test_own_change_without_a_baseline():
    study = {("none_ent", s): _run(collapse__token_entropy=[(1, 0.3), (5, 0.3 + d), (10, 0.3 + d)])
             for s, d in enumerate([0.1, -0.05, 0.2])}
    r = evaluate(study, Change("H1b", "entropy does not fall", "none_ent", "token_entropy", "negative"))
    assert r["effect"] == pytest.approx((0.1 - 0.05 + 0.2) / 3)
    assert r["verdict"] == "not shown"  # the interval holds 0: not shown to fall


def test_tracks_per_run_rho_minus_the_absolute_rho_of_the_other_metric():
    steps = (0, 10, 20, 30)
    # run a: MI rises with success (rho +1), entropy against it (rho -1): 1 - 1 = 0
    # run b: MI rises with success (+1), entropy flat -> rho undefined: the run has no value
    # run c: MI ranks 1, 3, 2 against success 1, 2, 3 (rho 0.5), entropy rho +1 -> 0.5 - 1 = -0.5
    a = _run(collapse__panel__turns__mi=list(zip(steps, [0.1, 0.2, 0.3, 0.4])),
             collapse__token_entropy=list(zip(steps, [9, 0.4, 0.3, 0.2])),
             eval__success=list(zip(steps, [0.0, 0.1, 0.2, 0.3])))
    b = _run(collapse__panel__turns__mi=list(zip(steps, [0, 0.1, 0.2, 0.3])),
             collapse__token_entropy=list(zip(steps, [1, 1, 1, 1])),
             eval__success=list(zip(steps, [0, 0.1, 0.2, 0.3])))
    c = _run(collapse__panel__turns__mi=list(zip(steps, [5, 0.1, 0.3, 0.2])),
             collapse__token_entropy=list(zip(steps, [5, 0.1, 0.2, 0.3])),
             eval__success=list(zip(steps, [5, 0.1, 0.2, 0.3])))
    h = Tracks("H3", "MI tracks success better than entropy", x="panel_turns_mi",
               than="token_entropy")
    r = evaluate({("none", 0): a, ("none", 1): b, ("top_p", 0): c}, h)
    # step 0 is not counted (steps_from=1): the 9 / 5 outliers there change nothing
    assert r["per_unit"] == pytest.approx({"none/0": 0.0, "top_p/0": -0.5})
    assert r["effect"] == pytest.approx(-0.25) and r["n"] == 2
    assert r["dropped"] == {"none/1": "3 step(s) from step 1 log panel_turns_mi, token_entropy and "
                                      "success; rho undefined for token_entropy"}
    only = evaluate({("none", 0): a, ("top_p", 0): c}, Tracks("t", "", "panel_turns_mi",
                                                              "token_entropy", arms=("top_p",)))
    assert only["per_unit"] == pytest.approx({"top_p/0": -0.5}) and only["verdict"] == "no data"


def test_ratio_of_step_times_by_hand():
    def run(t):  # monitor steps (5, 10) are 10x slower and skipped
        return _run(timing__step_s=[(1, t), (2, t), (5, 10 * t), (6, t), (10, 10 * t)])
    study = {("none", 0): run(4.0), ("top_p", 0): run(3.0),
             ("none", 1): run(5.0), ("top_p", 1): run(4.0)}
    r = evaluate(study, Ratio("H4", "filtering shortens steps", arm="top_p", baseline="none"))
    want = [math.log(3 / 4), math.log(4 / 5)]
    assert r["effect"] == pytest.approx(sum(want) / 2)
    assert r["ratio"] == pytest.approx(math.exp(sum(want) / 2))
    assert r["ratio_lo"] == pytest.approx(0.75) and r["ratio_hi"] == pytest.approx(0.8)
    assert r["verdict"] == "supported" and r["dropped"] == {}
    del study[("top_p", 1)]
    one = evaluate(study, Ratio("H4", "", arm="top_p", baseline="none"))
    assert one["n"] == 1 and one["dropped"] == {"none/1": "no top_p run of seed 1"}


def test_unknown_series_and_kinds_are_refused():
    with pytest.raises(ValueError, match="unknown series 'nope'"):
        evaluate({}, Change("x", "", "a", "nope", "negative"))
    with pytest.raises(TypeError, match="not a hypothesis"):
        evaluate({}, "H1")  # type: ignore[arg-type]
