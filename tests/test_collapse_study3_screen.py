"""Study 3's warm-start screen (README "Study 3", Deviations 2026-12-06): the eligibility rule on
hand-written step-0 rows, the choice of the counted seeds from ``screen.json``, the screening
run's command against d0's, the reuse of a finished d0 run, and how the analysis and the docs
block treat a finished run of an ineligible seed. No run is started: a stand-in replaces the
trainer's process."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.test_collapse_study3 import DOSES, _book, _doses, _run, runner, s3  # noqa: F401

G = "collapse/panel/turns/grounding/frac"


def _row(g: float | None, n: int = 124) -> dict:
    row = {"step": 0, "warm_start/token_acc": 0.96, G + "_lo": None, G + "_hi": None,
           "collapse/panel/turns/grounding/n_samples": n}
    if g is not None:
        row.update({G: g, G + "_lo": g - 0.08, G + "_hi": g + 0.08})
    return row


def _entries(eligible: list[bool]) -> dict:
    return {"seeds": [{"seed": k, "eligible": e, "grounding": 0.9 if e else 0.2}
                      for k, e in enumerate(eligible)]}


def test_the_eligibility_rule_on_hand_written_step_0_rows(s3):
    rule = s3[1].eligibility
    assert rule(_row(0.65))["eligible"] is True
    assert rule(_row(0.6))["eligible"] is True  # at least 0.6
    r = rule(_row(0.59))
    assert r["eligible"] is False and r["why"] == "step-0 later-turn panel grounding 0.590 < 0.6"
    assert (r["grounding"], r["grounding_lo"], r["n_samples"], r["token_acc"]) == (
        0.59, pytest.approx(0.51), 124, 0.96)
    missing = rule(_row(None, n=5))  # withheld: too few checkable samples
    assert missing["eligible"] is False and missing["grounding"] is None
    assert "withheld at step 0 (n = 5 samples" in missing["why"]
    assert rule(None)["eligible"] is False and "step 0 not logged" in rule(None)["why"]


def test_counted_seeds_are_the_first_four_eligible_in_order(s3, tmp_path):
    study3 = s3[0]
    got = study3.counted_seeds(_entries([False, True, True, False, True, True, True]))
    assert got == {"seeds": [1, 2, 4, 5], "finished": True, "deviation": False}
    # a gap: seed 3 not screened yet -> unfinished, seeds after it do not count yet
    gap = {"seeds": [e for e in _entries([True, True, False, True, True])["seeds"]
                     if e["seed"] != 3]}
    assert study3.counted_seeds(gap) == {"seeds": [0, 1], "finished": False, "deviation": False}
    few = study3.counted_seeds(_entries([k in (3, 17) for k in range(20)]))
    assert few == {"seeds": [3, 17], "finished": True, "deviation": True}
    # the counted runs' seeds: a clear error while screen.json is missing or unfinished
    out = tmp_path / "results_v3"
    out.mkdir()
    with pytest.raises(SystemExit, match="screen.json is missing"):
        study3.seeds_to_run(out)
    (out / "screen.json").write_text(json.dumps(gap))
    with pytest.raises(SystemExit, match="not finished: 2 of 4"):
        study3.seeds_to_run(out)
    (out / "screen.json").write_text(json.dumps(_entries([k in (3, 17) for k in range(20)])))
    assert study3.seeds_to_run(out) == [3, 17]
    assert study3.registered_seeds(out) == [3, 17]
    assert study3.registered_seeds(tmp_path) == [0, 1, 2, 3]  # no screen.json: the registration's


def test_the_screening_run_is_d0_with_one_step_and_no_checkpoint_cadence(s3):
    study3 = s3[0]
    for k in (0, 7):
        d0, screen = study3.overrides("d0", k, DOSES), study3.screen_overrides(k)
        assert len(d0) == len(screen)
        assert [(a, b) for a, b in zip(d0, screen) if a != b] == [
            ("trainer.total_steps=100", "trainer.total_steps=1"),
            ("trainer.save_every=10", "trainer.save_every=0")]
        assert {"filter=none", "algorithm.entropy_coef=0.0", f"seed={k}",
                f"trainer.warm_start.seed={k}"} <= set(screen)


def test_the_screen_reuses_a_finished_d0_run_and_stops_at_four_eligible(s3, tmp_path, monkeypatch):
    """Seed 0 has a finished counted d0 run at 0.218 (read, not run); seeds 1-7 are screened by a
    stand-in whose step-0 grounding is 0.9, 0.3, 0.8, withheld, 0.7, 0.95, 0.9: seeds 1, 3, 5
    and 6 are eligible, and seed 7 is never screened."""
    study3 = s3[0]
    out = tmp_path / "results_v3"
    _doses(out, DOSES)
    d0 = out / "runs" / "d0_s0"
    d0.mkdir(parents=True)
    (d0 / "summary.json").write_text("{}")
    (d0 / "metrics.jsonl").write_text(json.dumps(_row(0.218)) + "\n" + json.dumps({"step": 1}))
    (out / "results.json").write_text(json.dumps({"runs": [
        {"arm": "d0", "seed": 0, "returncode": 0, "overrides": study3.overrides("d0", 0, DOSES),
         "commit": "abc1234"}]}))
    values = {1: 0.9, 2: 0.3, 3: 0.8, 4: None, 5: 0.7, 6: 0.95, 7: 0.9}
    calls = []

    def fake(cmd, log, env, cwd):
        run_dir = Path(next(x for x in cmd if x.startswith("hydra.run.dir=")).split("=", 1)[1])
        calls.append((run_dir.name, Path(log).name, env["RAGEN2_CACHE"], cmd[1:-1]))
        run_dir.mkdir(parents=True)
        (run_dir / "metrics.jsonl").write_text(
            json.dumps(_row(values[int(run_dir.name[1:])], n=5 if run_dir.name == "s4" else 124))
            + "\n")
        return {"returncode": 0, "wall_s": 3.0, "foreign_cpu_s": 0.0, "foreign_cores": 0.0}

    monkeypatch.setattr(study3, "run_watched", fake)
    cache = tmp_path / "cache"
    assert study3.run_screen(out, cache) == 0
    assert [c[0] for c in calls] == ["s1", "s2", "s3", "s4", "s5", "s6"]
    assert calls[0][1:] == ("s1.log", str(cache / "s1" / "ragen2"), study3.screen_overrides(1))
    screen = json.loads((out / "screen.json").read_text())
    assert [(e["seed"], e["eligible"]) for e in screen["seeds"]] == [
        (0, False), (1, True), (2, False), (3, True), (4, False), (5, True), (6, True)]
    first = screen["seeds"][0]
    assert (first["source"], first["reused_counted_run"], first["grounding"]) == (
        "runs/d0_s0", True, 0.218)
    assert screen["seeds"][1]["source"] == "screen/s1" and screen["counted"] == [1, 3, 5, 6]
    assert screen["finished"] is True and "withheld" in screen["seeds"][4]["why"]
    assert study3.seeds_to_run(out) == [1, 3, 5, 6]
    assert study3.run_screen(out, cache) == 0 and len(calls) == 6  # resumable: nothing again


def test_dry_run_of_the_screen_prints_the_commands(runner, s3, tmp_path, monkeypatch, capsys):
    out = tmp_path / "results_v3"
    out.mkdir()
    (out / "screen.json").write_text(json.dumps(_entries([False, True])))
    monkeypatch.setattr(sys, "argv", ["run.py", "--design", "v3", "--screen", "--dry-run",
                                      "--out", str(out), "--cache-root", str(tmp_path / "c")])
    assert runner.main() == 0
    lines = capsys.readouterr().out.splitlines()
    assert "screened already: [0, 1]; counted so far: [1]" in lines[0]
    assert [x.split(":")[0] for x in lines[1:]] == [f"seed {k}" for k in range(2, 20)]
    assert lines[1].split(" ")[-1] == f"hydra.run.dir={out / 'screen' / 's2'}"
    assert "trainer.total_steps=1 " in lines[1] and "trainer.save_every=0 " in lines[1]
    assert not (out / "screen").exists()


def test_an_ineligible_seeds_run_is_reported_outside_the_hypotheses(s3, tmp_path):
    """d0 seed 0 finished but seed 0 is ineligible; the counted seeds are 1-4, d0 seeds 1 and 2
    finished: G1 rests on those two, and d0_s0 is reported apart with why."""
    study3, _, report = s3
    out = tmp_path / "results_v3"
    _doses(out, DOSES)
    for seed, g_end in ((0, 0.2), (1, 0.5), (2, 0.6)):
        _run(out, "d0", seed, 0.9 if seed else 0.218, g_end, success_end=0.4)
    (out / "screen.json").write_text(json.dumps({"seeds": [
        {"seed": 0, "eligible": False, "grounding": 0.218, "why": "x"},
        *({"seed": k, "eligible": True, "grounding": 0.97, "why": "x"} for k in range(1, 5))]}))
    result = report.analyze(out, _book(out, [("d0", 0), ("d0", 1), ("d0", 2)]),
                            {"doses": DOSES}, plots=False, resamples=200)
    why = "ineligible warm start (step-0 later-turn panel grounding 0.218 < 0.6)"
    assert result["counted_seeds"] == [1, 2, 3, 4]
    assert result["not_counted"] == {"d0_s0": why}
    assert "d0_s0" not in result["missing"] and "d0_s4" in result["missing"]
    g1 = result["hypotheses"][0]
    assert g1["id"] == "G1" and g1["n"] == 2 and set(g1["per_unit"]) == {1, 2}
    assert not any(k.endswith("/0") for h in result["hypotheses"] for k in h["dropped"])
    assert [r["key"] for r in result["per_run"]] == ["d0_s1", "d0_s2"]
    tables = (out / "tables.md").read_text()
    assert f"- reported, left out of G1-G5: `d0_s0`: {why}" in tables
    assert "| `d0_s0` (not counted) | 0.22 |" in tables

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from results_pages import BLOCKS
    text = BLOCKS["study3-status"](str(out))
    assert "| 0 | 0.218 | no |" in text and "| 1 | 0.970 | **yes** |" in text
    assert "Counted seeds: 1, 2, 3, 4." in text
    assert "| seed 1 | seed 2 | seed 3 | seed 4 |" in text.replace("arm | ", "")
    assert f"| {why} |" in text
