"""benchmarks/robustness.py: the issue-14 bar and the near bar (issue 31), on hand-made
distributions."""

from __future__ import annotations

import pytest

from tests.scripts import load_benchmark


@pytest.fixture(scope="module")
def rb():
    return load_benchmark("robustness.py", "robustness")


def runs(rb, rows):
    """rows: {(warm, rl): (before, after, wall)} -> the JSON's runs."""
    return {rb.run_key(w, s): {"returncode": 0, "before": b, "after": a, "gain": a - b, "wall_s": t}
            for (w, s), (b, a, t) in rows.items()}


def doc(rb, label_rows, base_rows):
    return {"labels": {"new": {"runs": runs(rb, label_rows)},
                       "base": {"runs": runs(rb, base_rows)}}}


# the baseline: afters 0.20 .. 0.30 (median 0.25), walls 100 .. 600 s (median 350 s)
BASE = {(w, s): (0.05, 0.20 + 0.02 * (2 * w + s), 100.0 * (2 * w + s + 1))
        for w in range(3) for s in range(2)}


def verdicts(lines):
    return [line.rsplit("-> ", 1)[-1] for line in lines if "->" in line]


def test_a_distribution_that_clears_every_line(rb):
    new = {(w, s): (0.1, 0.45 + 0.01 * w, 650.0) for w in range(3) for s in range(2)}
    lines = rb.check_bar("new", doc(rb, new, BASE), "base")
    assert verdicts(lines) == ["yes"] * 4
    assert "median gain >= 0.25: 0.360" in lines[1] and "0.460 > base's 0.250" in lines[2]
    assert "max 650 s = 1.86x" in lines[3]


def test_one_weak_seed_one_slow_run_and_a_missing_run_each_fail(rb):
    new = {(w, s): (0.1, 0.45, 650.0) for w in range(3) for s in range(2)}
    new[(2, 1)] = (0.1, 0.24, 701.0)  # gain 0.14 < 0.15; 701 s > 2 x 350 s
    del new[(1, 0)]
    lines = rb.check_bar("new", doc(rb, new, BASE), "base")
    assert verdicts(lines) == ["NO", "yes", "yes", "NO", "NO"]
    assert lines[-1] == "not run yet: w1_s0 -> NO"


def test_a_gain_bought_by_a_weaker_start_fails_the_after_line(rb):
    # gains 0.25, but the median after (0.25) only equals the baseline's
    new = {(w, s): (0.0, 0.25, 300.0) for w in range(3) for s in range(2)}
    assert verdicts(rb.check_bar("new", doc(rb, new, BASE), "base")) == ["yes", "yes", "NO", "yes"]


def test_seeds_outside_the_grid_are_reported_not_judged(rb):
    new = {(w, s): (0.1, 0.45, 650.0) for w in range(3) for s in range(2)}
    new[(3, 2)] = (0.1, 0.1, 5000.0)  # would fail gain and wall if it were judged
    lines = rb.check_bar("new", doc(rb, new, BASE), "base")
    assert verdicts(lines) == ["yes"] * 4
    assert lines[-1] == "seeds outside the bar's grid: w3_s2 gain 0.000"


# the near bar: BASE's gains are 0.15 .. 0.25, median (0.19 + 0.21) / 2 = 0.20


def test_near_bar_passes_inside_the_margin_and_fails_just_outside(rb):
    new = {(w, s): (0.1, 0.26 + 0.01 * w, 650.0) for w in range(3) for s in range(2)}  # 0.16-0.18
    lines = rb.check_near("new", doc(rb, new, BASE), "base")
    assert verdicts(lines) == ["yes", "yes"]
    assert "median gain 0.170 within 0.05 of base's 0.200: -0.030" in lines[1]
    new = {(w, s): (0.1, 0.24 + 0.01 * w, 650.0) for w in range(3) for s in range(2)}  # 0.14-0.16
    lines = rb.check_near("new", doc(rb, new, BASE), "base")
    assert verdicts(lines) == ["NO", "yes"]  # min gain 0.14; median 0.15 is 0.05 under 0.20
    new = {(w, s): (0.1, 0.40, 650.0) for w in range(3) for s in range(2)}  # 0.30: too far above
    assert verdicts(rb.check_near("new", doc(rb, new, BASE), "base")) == ["yes", "NO"]


def test_near_bar_names_missing_runs_of_either_label_and_ignores_other_seeds(rb):
    new = {(w, s): (0.1, 0.30, 650.0) for w in range(3) for s in range(2)}
    new[(3, 2)] = (0.1, 0.1, 650.0)  # outside the grid: not judged
    del new[(0, 1)]
    base = dict(BASE)
    del base[(2, 0)]
    base[(4, 2)] = (0.0, 0.9, 100.0)  # outside the grid: not in base's median either
    lines = rb.check_near("new", doc(rb, new, base), "base")
    assert verdicts(lines) == ["yes", "yes", "NO", "NO"]
    assert "of base's 0.190" in lines[1]  # median of 0.15 0.17 0.19 0.21 0.25 (w2_s0's 0.23 gone)
    assert lines[2:] == ["new: not run yet: w0_s1 -> NO", "base: not run yet: w2_s0 -> NO"]


def test_a_retired_label_gets_no_new_runs_but_a_plain_run_measures_todays_default(rb, tmp_path,
                                                                               monkeypatch):
    """``default`` was recorded with no overrides while those were the defaults; a new run under it
    would measure today's job under the old name, so only --report may name it. A run without
    --label measures :data:`CURRENT`, whose preset spells its settings out."""
    out = tmp_path / "robustness.json"
    monkeypatch.setattr("sys.argv", ["robustness.py", "--label", "default", "--out", str(out)])
    with pytest.raises(SystemExit) as e:
        rb.main()
    assert e.value.code == 2 and not out.exists()  # refused before anything ran or was written
    assert rb.CURRENT in rb.PRESETS and rb.PRESETS[rb.CURRENT]
    assert "model.dtype=auto" in rb.PRESETS[rb.CURRENT] and rb.CURRENT not in rb.RETIRED


def test_labels_run_on_different_cpu_kinds_get_a_caveat_and_the_same_kind_none(rb):
    same = doc(rb, BASE, BASE)
    for label in ("new", "base"):
        for r in same["labels"][label]["runs"].values():
            r["machine"] = {"cpu": "AMD EPYC"}
    assert rb.machine_caveat("new", same, "base") == []
    assert not any("CPU kinds" in line for line in rb.check_near("new", same, "base"))
    mixed = same
    next(iter(mixed["labels"]["base"]["runs"].values()))["machine"] = {"cpu": "Intel Xeon"}
    del next(iter(mixed["labels"]["new"]["runs"].values()))["machine"]
    assert rb.cpu_kinds(mixed["labels"]["new"]["runs"]) == ["AMD EPYC", "unrecorded"]
    caveat = ("CPU kinds differ (new: AMD EPYC, unrecorded; base: AMD EPYC, Intel Xeon): "
              "the comparison mixes the machine with the setting")
    assert rb.check_near("new", mixed, "base")[-1] == caveat
    assert caveat in rb.check_bar("new", mixed, "base")
