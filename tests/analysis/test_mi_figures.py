"""Every MI plot draws the bound (log of the distinct prompts) and the floor (the permutation
null's 95th percentile, not its mean) on a y-range that holds both and the curve."""

from __future__ import annotations

import math

import pytest
from matplotlib.figure import Figure

from ragen2.analysis import plots, report_figures, study

LOG16 = math.log(16)


def _run(mi, floor, null=0.001, prefix="collapse/"):
    """Steps 1..3 of a collapsed run: MI ~0 with its floor, bound log 16."""
    return {s: {prefix + "mi": m, prefix + "mi_floor": f, prefix + "mi_null": null,
                prefix + "mi_bound": LOG16, "eval/success": 0.1 * s}
            for s, (m, f) in enumerate(zip(mi, floor), start=1)}


def _lines(ax):
    return {line.get_gid(): list(line.get_ydata()) for line in ax.get_lines() if line.get_gid()}


def test_mi_ylim_by_hand():
    # 0 .. log 16 with 5% padding each side; a flat zero curve still gets a range
    assert study.mi_ylim([0.002, 0.004, LOG16]) == pytest.approx((-0.05 * LOG16, 1.05 * LOG16))
    assert study.mi_ylim([-0.01, 0.3]) == pytest.approx((-0.01 - 0.0155, 0.3 + 0.0155))
    assert study.mi_ylim([0.0]) == (-0.05, 0.05)


def test_study_curves_draw_bound_and_floor_per_arm():
    runs = {("none", 0): _run([0.002, 0.001, 0.003], [0.004, 0.005, 0.004]),
            ("none", 1): _run([0.004, 0.003, 0.001], [0.006, 0.005, 0.004]),
            ("top_p", 0): _run([0.5, 0.6, 0.7], [0.01, 0.01, 0.02])}
    fig = study.curves_figure(runs)
    ax = next(a for a in fig.axes if a.get_title().startswith("MI (nats)"))
    got = _lines(ax)
    assert got["bound"] == pytest.approx([LOG16] * 3)
    assert got["floor:none"] == pytest.approx([0.005, 0.005, 0.004])  # mean of the q95 floors
    assert got["floor:top_p"] == pytest.approx([0.01, 0.01, 0.02])
    assert 0.001 not in [y for ys in got.values() for y in ys]  # the null's mean is not drawn
    assert ax.get_ylim() == pytest.approx((-0.05 * LOG16, 1.05 * LOG16))
    # the later-turn panel's panel has no data here: nothing drawn, no range forced
    turns = next(a for a in fig.axes if a.get_title().startswith("MI at later turns"))
    assert _lines(turns) == {}


def test_report_curves_draw_bound_and_floor():
    metrics = _run([0.002, 0.001, 0.003], [0.004, 0.005, 0.004], prefix="collapse/panel/turns/")
    for s, row in metrics.items():
        row["collapse/panel/turns/mi_lo"], row["collapse/panel/turns/mi_hi"] = -0.001, 0.006
    curve = next(c for c in report_figures.CURVES if c.name == "panel_turns_mi")
    ax = report_figures.curve_figure(curve, metrics).axes[0]
    got = _lines(ax)
    assert got["collapse/panel/turns/mi_bound"] == pytest.approx([LOG16] * 3)
    assert got["collapse/panel/turns/mi_floor"] == pytest.approx([0.004, 0.005, 0.004])
    lo, hi = -0.001, LOG16  # the band's lower edge, the bound
    pad = 0.05 * (hi - lo)
    assert ax.get_ylim() == pytest.approx((lo - pad, hi + pad))
    # the batch monitor's curve and the first-turn panel's carry the same two lines
    names = {c.name: [line.key for line in c.lines] for c in report_figures.CURVES}
    assert names["mi"] == ["collapse/mi", "collapse/mi_floor", "collapse/mi_bound"]
    assert names["panel_mi"][1:] == ["collapse/panel/mi_floor", "collapse/panel/mi_bound"]
    assert names["action_mi"][1:] == ["collapse/action/mi_floor", "collapse/action/mi_bound"]


def test_analyze_mi_plot_draws_bound_and_floor_of_every_estimate():
    metrics = _run([0.002, 0.001, 0.003], [0.004, 0.005, 0.004])
    records = [{"step": s, "mi": 0.01, "mi_floor_mean": 0.002, "mi_floor_q95": 0.02,
                "log_n_inputs": math.log(8)} for s in (1, 2, 3)]
    fig = Figure()
    ax = fig.add_subplot()
    assert plots.PANELS["mi"][0](ax, metrics, records)
    got = _lines(ax)
    assert got["collapse/mi_bound"] == pytest.approx([LOG16] * 3)
    assert got["collapse/mi_floor"] == pytest.approx([0.004, 0.005, 0.004])
    assert got["plugin:mi_floor_q95"] == pytest.approx([0.02] * 3)
    assert got["plugin:log_n_inputs"] == pytest.approx([math.log(8)] * 3)
    assert "collapse/mi_null" not in got and "plugin:mi_floor_mean" not in got
    assert ax.get_ylim() == pytest.approx((-0.05 * LOG16, 1.05 * LOG16))
