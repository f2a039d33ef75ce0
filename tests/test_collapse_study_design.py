"""The collapse study's design as its runner builds it (benchmarks/collapse_study/run.py): the
overrides of each arm and seed, the entropy arms' refusal before the coefficient is measured, and
the pre-registered hypotheses naming arms and series that exist. No run: the overrides only."""

from __future__ import annotations

import json

import pytest

from ragen2.analysis.study import SERIES
from tests.scripts import load_benchmark


@pytest.fixture(scope="module")
def study():
    return load_benchmark("collapse_study/run.py", "collapse_study_run")


def _settings(study, design="v2", variant="default"):
    return {**study.DESIGNS[design]["full"], "design": design, "variant": variant}


def test_v2_arms_of_a_seed_share_its_warm_start_and_differ_only_in_the_arm(study, monkeypatch):
    monkeypatch.setattr(study, "ENTROPY_COEF", 0.02)
    s = _settings(study)
    runs = {arm: study.overrides(arm, 1, s) for arm in study.DESIGNS["v2"]["arms"]}
    for o in runs.values():
        assert "seed=1" in o and "trainer.warm_start.seed=1" in o
        assert "trainer.total_steps=40" in o and "monitor.grad_snr_every=5" in o
        assert not any(x.startswith("rollout.env_groups") for x in o)  # today's default batch
    common = set.intersection(*(set(o) for o in runs.values()))
    assert {arm: sorted(set(o) - common) for arm, o in runs.items()} == {
        "none": ["filter=none"], "top_p": ["filter=ragen2_paper"],
        "none_ent": ["algorithm.entropy_coef=0.02", "filter=none"],
        # the dated deviation (README "Study 2"): a step that keeps nothing does not end the run
        "top_p_ent": ["algorithm.entropy_coef=0.02", "filter=ragen2_paper",
                      "trainer.max_skipped_steps=1000"],
        "tiered": ["filter=tiered"],
        # exploratory (the dated deviation of the second sitting): RAGEN-2's bonus and c / 10
        "none_ent_paper": ["algorithm.entropy_coef=0.003", "filter=none"],
        "none_ent_tenth": ["algorithm.entropy_coef=0.002", "filter=none"]}
    # a plain invocation runs the pre-registered five only
    assert study.DESIGNS["v2"]["default_arms"] == ["none", "top_p", "none_ent", "top_p_ent", "tiered"]
    assert "env=sokoban" in study.overrides("none", 0, _settings(study, variant="sokoban"))


def test_v1_keeps_the_superseded_study_reproducible(study):
    o = study.overrides("top_p", 2, _settings(study, "v1"))
    assert o[:3] == ["rollout.env_groups=8", "trainer.warm_start.epochs=1", "filter=top_p"]
    assert "seed=2" in o and not any(x.startswith("trainer.warm_start.seed") for x in o)


def test_entropy_arms_refuse_to_run_before_the_coefficient_is_measured(study, monkeypatch):
    monkeypatch.setattr(study, "ENTROPY_COEF", None)
    with pytest.raises(SystemExit, match="ENTROPY_COEF is not set: run --measure-entropy"):
        study.overrides("none_ent", 0, _settings(study))
    assert "filter=none" in study.overrides("none", 0, _settings(study))


def test_hypotheses_name_arms_and_series_that_exist(study):
    arms = set(study.DESIGNS["v2"]["default_arms"])  # no verdict reads an exploratory arm
    hs = study.hypotheses()
    assert [h.id for h in hs] == ["H1a", "H1b", "H1c", "H2a", "H2b", "H3a", "H3b", "H4a", "H4b"]
    for h in hs:
        for arm in (getattr(h, "arm", None), getattr(h, "baseline", None)):
            assert arm is None or arm in arms
        for name in (getattr(h, k, None) for k in ("metric", "x", "than", "y")):
            assert name is None or name in SERIES
        assert h.direction in ("negative", "positive")


def _panel_step(folder, step, reasonings):
    """One later-turn panel file: a prompt per entry of ``reasonings`` (its samples' texts)."""
    folder.mkdir(parents=True, exist_ok=True)
    recs = [{"step": step, "key": k, "env": "frozenlake", "turn": 2, "prompt": f"state {k}",
             "reasoning": texts, "answers": ["Down"] * len(texts)}
            for k, texts in enumerate(reasonings)]
    (folder / f"step_{step:06d}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))


def test_examples_show_the_most_and_least_collapsed_later_turn_reasoning(study, tmp_path):
    """The runs are chosen by the fall of the later-turn panel MI (a run starting at its floor
    cannot fall and is not chosen; one whose reasoning vanished has its own section), and the
    3-grams shared by at least half the prompts at a step are marked."""
    def run(name, mi, floor, last):
        d = tmp_path / "runs" / name
        _panel_step(d / "panel" / "turns", 0, [[f"I am at row {k}. The goal is far."] for k in range(4)])
        _panel_step(d / "panel" / "turns", 40, last)
        metrics = {0: {"collapse/panel/turns/mi": mi[0], "collapse/panel/turns/mi_floor": floor},
                   40: {"collapse/panel/turns/mi": mi[1], "collapse/panel/turns/mi_floor": floor}}
        return d, metrics
    same = [["I am at row 1. The goal is far."]] * 4
    runs = {("none", 0): run("none_s0", (1.6, 0.4), 0.01, same),      # falls 1.2: most
            ("top_p", 0): run("top_p_s0", (1.6, 1.5), 0.01, same),     # falls 0.1: least
            ("none", 1): run("none_s1", (0.0, -0.5), 0.02, same),      # at its floor from step 0
            ("none_ent", 0): run("none_ent_s0", (1.6, 0.0), 0.01, [[""]] * 4)}  # vanished
    rows = [{"arm": a, "seed": s, "initial_success": 0.1, "final_success": 0.5} for a, s in runs]
    study.write_examples(tmp_path, rows, {k: d for k, (d, _) in runs.items()},
                         {k: m for k, (_, m) in runs.items()})
    text = (tmp_path / "examples.md").read_text()
    heads = [line for line in text.splitlines() if line.startswith("## ")]
    assert [h.split(": ")[1].split(" (")[0] for h in heads] == ["none seed 0", "top_p seed 0",
                                                               "none_ent seed 0"]
    assert "1.60 -> 0.40 nats" in heads[0] and heads[2].startswith("## reasoning vanished")
    # step 0: "the goal is far" is in every prompt, the row differs; step 40: all the same
    assert ("reasoning: <mark>I am at row</mark> 0. <mark>The goal is far</mark>." in text
            and "reasoning: <mark>I am at row 1. The goal is far</mark>." in text)
    assert "- step 40: 0% of the samples write reasoning" in text and "reasoning: (none)" in text


def test_tables_give_median_and_range_and_say_where_an_instrument_stopped(study, tmp_path):
    def run(success_end, mi_end, n_end=None):
        m = {0: {"eval/success": 0.1, "collapse/panel/turns/mi": 1.6},
             1: {"filter/kept_ratio": 0.5}, 2: {"filter/kept_ratio": 1.0},
             5: {"collapse/panel/turns/mi": 1.0}, 40: {"eval/success": success_end}}
        if mi_end is not None:
            m[40]["collapse/panel/turns/mi"] = mi_end
        if n_end is not None:  # a measurement withheld for too few samples: its count, no value
            m[40]["collapse/panel/turns/n_samples"] = n_end
        return m
    metrics = {("none", 0): run(0.5, 1.2), ("none", 1): run(0.3, 1.4), ("none", 2): run(0.4, None)}
    result = {"settings": {"steps": 40},
              "runs": [{"arm": "none", "seed": s, "returncode": 0, "wall_s": w}
                       for s, w in enumerate((100.0, 300.0, 200.0))],
              "hypotheses": [{"id": "H", "claim": "rho | bars", "effect": -0.5, "lo": -1.0,
                              "hi": -0.1, "n": 3, "verdict": "supported", "dropped": {"a/0": "x"}}]}
    study.write_tables(tmp_path, result, metrics)
    row = next(line for line in (tmp_path / "tables.md").read_text().splitlines()
               if line.startswith("| `none`"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1] == "3"
    assert cells[2] == "0.10 [0.10, 0.10] -> 0.40 [0.30, 0.50]"  # held-out success
    assert cells[3] == ("1.60 [1.60, 1.60] -> 1.30 [1.20, 1.40] (1 none at step 40: nothing "
                        "logged; last at 5)")
    assert cells[5] == cells[6] == "not logged"  # grounding: no run logged it
    assert cells[9] == "0.75 [0.75, 0.75]"  # kept ratio: the mean over RL steps
    assert cells[10] == "200 [100, 300]"
    assert r"| H: rho \| bars | -0.500 [-1.000, -0.100] | 3 | supported | 1 |" in (
        tmp_path / "tables.md").read_text()
    # a value withheld under monitor.min_samples: "none", with its sample count and the minimum
    metrics[("none", 2)] = run(0.4, None, n_end=3.0)
    study.write_tables(tmp_path, result, metrics, {("none", 2): 16})
    text = (tmp_path / "tables.md").read_text()
    assert "1.30 [1.20, 1.40] (1 none at step 40: n = 3 < 16; last at 5)" in text
    assert "fewer than monitor.min_samples = 16 parsable reasoning samples is withheld" in text
