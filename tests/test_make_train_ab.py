"""benchmarks/make_train_ab.py: the run order, the ``ARGS`` each run types, the ratios over
hand-made run records, and continuing an interrupted comparison (nothing is cloned or trained
here; speed is measured there, never asserted)."""

from __future__ import annotations

import shlex

import pytest

from tests.scripts import load_benchmark


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("make_train_ab.py", "make_train_ab")


def test_the_sides_alternate_a_b_b_a(bench):
    assert bench.side_order(1) == [(0, "A"), (0, "B")]
    assert bench.side_order(2) == [(0, "A"), (0, "B"), (1, "B"), (1, "A")]
    assert bench.side_order(3)[4:] == [(2, "A"), (2, "B")]
    with pytest.raises(ValueError, match="--rounds must be >= 1"):
        bench.side_order(0)


def test_make_args_quote_each_override_for_the_recipe_shell(bench, tmp_path):
    args = bench.make_args(tmp_path / "run 1", ["learner.micro_batch_tokens=8192",
                                                "trainer.loggers=[jsonl, console]"])
    assert shlex.split(args) == [f"hydra.run.dir={tmp_path / 'run 1'}",
                                 "learner.micro_batch_tokens=8192",
                                 "trainer.loggers=[jsonl, console]"]


def _run(side, rnd, wall, step=None, gain=0.3, code=0):
    return {"side": side, "round": rnd, "returncode": code, "wall_s": wall,
            "foreign_cores": 0.01, "steps": {} if step is None else {"step_s": step},
            "gain": gain}


def test_summarize_takes_medians_per_side_and_the_ratio_of_medians(bench):
    runs = [_run("A", 0, 1000.0, 20.0, 0.35), _run("B", 0, 600.0, 11.0, 0.40),
            _run("B", 1, 500.0, 9.0, 0.30), _run("A", 1, 1200.0, 22.0, 0.25),
            _run("A", 2, 99.0, code=1)]  # a failed run counts in neither median
    s = bench.summarize(runs)
    assert (s["runs"], s["failed"]) == (5, 1)
    assert s["A"]["wall_s"] == 1100.0 and s["B"]["wall_s"] == 550.0
    assert s["wall_ratio"] == pytest.approx(0.5)
    assert s["step_ratio"] == pytest.approx(10.0 / 21.0)
    assert s["pair_wall_ratios"] == pytest.approx([0.6, 500.0 / 1200.0])
    assert s["A"]["gains"] == [0.35, 0.25] and s["B"]["gain"] == pytest.approx(0.35)


def test_summarize_without_one_side_has_no_ratio(bench):
    s = bench.summarize([_run("A", 0, 1000.0, 20.0)])
    assert s["wall_ratio"] is None and s["step_ratio"] is None and s["pair_wall_ratios"] == []
    assert s["B"]["n"] == 0


def test_an_interrupted_comparison_continues_and_other_settings_are_refused(bench):
    settings = {"commits": {"A": "7fe5491", "B": "cc44aed"}, "args": {"A": [], "B": []},
                "rounds": 2, "order": ["0A", "0B", "1B", "1A"]}
    previous = {"settings": settings, "runs": [_run("A", 0, 1000.0), _run("B", 0, 9.0, code=1)]}
    kept = bench.kept_runs(previous, settings)
    assert [(r["round"], r["side"]) for r in kept] == [(0, "A")]  # the failed run is run again
    assert bench.kept_runs(None, settings) == []
    other = {**settings, "args": {"A": [], "B": ["learner.micro_batch_tokens=8192"]}}
    with pytest.raises(SystemExit, match="other settings"):
        bench.kept_runs(previous, other)


def test_the_block_renders_each_run_and_the_ratio(bench, tmp_path):
    import json
    import sys

    from tests.scripts import BENCHMARKS

    sys.path.insert(0, str(BENCHMARKS))
    from results_pages import BLOCKS

    runs = [{**_run("A", 0, 1100.0, 20.0), "commit": "7fe5491", "before": 0.1, "after": 0.45},
            {**_run("B", 0, 660.0, 12.0), "commit": "b165bec", "before": 0.1, "after": 0.4,
             "steps": {"step_s": 12.0, "warm_start_s": 150.0}},
            {**_run("B", 1, 9.0, code=1), "commit": "b165bec", "gain": None}]
    doc = {"settings": {"commits": {"A": "7fe5491", "B": "b165bec"},
                        "args": {"A": [], "B": ["learner.micro_batch_tokens=8192"]},
                        "rounds": 2, "order": ["0A", "0B", "1B", "1A"]},
           "goal": bench.GOAL, "runs": runs, "summary": bench.summarize(runs)}
    path = tmp_path / "ab.json"
    path.write_text(json.dumps(doc))
    text = BLOCKS["make-train-ab"](str(path))
    assert "| 1 | A | `7fe5491` | exit 0 | 1,100.00 s | 20.00 s | — | 0.100 -> 0.450 | 0.01 |" in text
    assert "| 1 | B | `b165bec` | exit 0 | 660.00 s | 12.00 s | 150.00 s | 0.100 -> 0.400 |" in text
    assert "| 2 | B | `b165bec` | **exit 1** |" in text and "| — | 0.01 |" in text
    assert ("4 runs in the order 0A 0B 1B 1A (side B: `learner.micro_batch_tokens=8192`): B / A "
            "of the median wall times **0.600** (per round 0.600; the goal <= 0.5); of the median "
            "RL step 0.600.") in " ".join(text.split())
