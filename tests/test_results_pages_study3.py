"""The results page's Study 3 block (``study3-status``, benchmarks/results_pages/collapse.py) on
hand-made ``results_v3/`` trees: the pilot's candidates, the doses, the registered runs' states,
a finished run's figures, and the verdicts only once every registered run is finished. No run is
started: the run folders are written by hand (tests/test_collapse_study3.py's ``_run``) and
analysed by ``study3_report.analyze``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from results_pages import BLOCKS, collapse  # noqa: E402
from tests.test_collapse_study3 import DOSES, ORDER_OF_A_SEED, _book, _panel, _run  # noqa: E402

NOT_SURVIVING = {"coef": 0.1, "survives": False, "stopped_at": 16, "returncode": 75,
                 "why": "batch format errors above 0.5 for 5 steps in a row (steps 12-16): "
                        "stopped early", "commit": "aaa1111"}
SURVIVING = {"coef": 0.03, "survives": True, "stopped_at": None, "returncode": 0,
             "why": "every evaluation and steps 91-100 at most 0.2", "commit": "bbb2222"}


def _pilot(out: Path, outcomes: list[dict], logged: dict[float, int]) -> None:
    """``pilot/pilot.json`` with ``outcomes``, and a pilot run folder per ``logged`` candidate
    whose metrics reach the step given."""
    for coef, last in logged.items():
        d = out / "pilot" / f"c{coef}_s100"
        d.mkdir(parents=True)
        (d / "metrics.jsonl").write_text("".join(json.dumps({"step": s}) + "\n"
                                                 for s in range(last + 1)))
    (out / "pilot").mkdir(parents=True, exist_ok=True)
    (out / "pilot" / "pilot.json").write_text(json.dumps({"candidates": outcomes}))


def _rows(text: str, first: str) -> list[list[str]]:
    """The cells of the table rows of ``text`` whose first cell is ``first``."""
    return [[c.strip() for c in line.strip("|").split("|")] for line in text.splitlines()
            if line.startswith(f"| {first} |")]


def _cells(text: str) -> list[str]:
    """Every state cell of the registered runs' table."""
    return [c for arm in ORDER_OF_A_SEED for c in _rows(text, f"`{arm}`")[0][1:]]


def test_todays_shape_a_pilot_under_way_and_no_run(tmp_path):
    """0.1 recorded as not surviving; 0.03's folder there but no entry: running or not run."""
    out = tmp_path / "results_v3"
    _pilot(out, [NOT_SURVIVING], {0.1: 17, 0.03: 40})
    text = BLOCKS["study3-status"](str(out))
    assert _rows(text, "0.1") == [["0.1", "does not survive", NOT_SURVIVING["why"], "17",
                                   "`aaa1111`"]]
    assert _rows(text, "0.03")[0][1] == "running or not run"
    assert _rows(text, "0.01")[0][1] == _rows(text, "0.003")[0][1] == \
        "waits for the earlier candidates"
    assert "The doses are not chosen yet (candidate 0.03 has no outcome yet" in text
    assert _cells(text) == ["not run"] * 24
    assert "The registered verdicts wait for the registered runs: 0 of 24 finished." in text


def test_a_survivor_its_doses_one_finished_and_one_interrupted_run(tmp_path):
    _, report = collapse._study3()
    out = tmp_path / "results_v3"
    _pilot(out, [NOT_SURVIVING, SURVIVING], {0.1: 17, 0.03: 100})
    (out / "doses.json").write_text(json.dumps({"doses": DOSES, "fallback": False}))
    _run(out, "d0", 0, 0.9, 0.6, success_end=0.3)  # grounding -0.30: template collapse
    (out / "runs" / "dhigh_s0").mkdir(parents=True)
    (out / "runs" / "dhigh_s0" / "metrics.jsonl").write_text('{"step": 40}\n')
    book = _book(out, [("d0", 0)]) + [{"arm": "dhigh", "seed": 0, "returncode": 75}]
    report.analyze(out, book, {"doses": DOSES}, plots=False, resamples=100)
    text = BLOCKS["study3-status"](str(out))
    assert [r[:2] for r in _rows(text, "0.1") + _rows(text, "0.03")] == [
        ["0.1", "does not survive"], ["0.03", "**survives**"]]
    assert _rows(text, "0.03")[0][3:] == ["100", "`bbb2222`"]
    assert _rows(text, "0.01")[0][1] == "not needed: an earlier candidate survives"
    assert "Doses (`doses.json`): d0 0, dlow 0.003 and dhigh 0.03." in text
    cells = _cells(text)
    assert cells.count("**finished**") == 1 and cells.count("not run") == 22
    assert _rows(text, "`d0`")[0][1] == "**finished**"
    assert _rows(text, "`dhigh`")[0][1] == "exit 75 (interrupted: resumable), last step logged 40"
    assert _rows(text, "`d0_s0`") == [["`d0_s0`", "0.90 -> 0.60, 0.60", "-0.300 [-, -]",
                                       "0.10 -> 0.30", "0.05", "**yes**"]]
    assert "wait for the registered runs: 1 of 24 finished." in text
    assert "**G1**" not in text
    # the three questions, interim: one assessable run, and it collapsed
    assert "**Interim**" in text and "in 1 of 1 assessable finished runs (d0/0)" in text
    assert "| d0 (0) | 1 of 1 (seed 0) | 0 of 0 |" in text
    answers = BLOCKS["study3-answers"](str(out))
    assert answers.startswith("The three questions") and "(23 not finished)" in answers
    assert "| d0 (0) | 1 of 1 (seed 0) | 0 of 0 |" in answers and "**G1**" not in answers
    assert "What template collapse looks like" not in text  # no panel files: nothing to show
    # the run's panel: prompt 1 fell (1, 1 -> 0, nothing checkable), prompt 0 held
    _panel(out / "runs" / "d0_s0", 0, [[1.0, 1.0], [1.0, 1.0]])
    _panel(out / "runs" / "d0_s0", 100, [[1.0, 1.0], [0.0, None]])
    text = BLOCKS["study3-status"](str(out))
    assert "What template collapse looks like in `d0_s0`" in text and "(state `state 1`)" in text
    assert _rows(text, "0") + _rows(text, "100") == [
        ["0", "I am at row 1, sample 0.", "1"], ["0", "I am at row 1, sample 1.", "1"],
        ["100", "I am at row 1, sample 0.", "0"], ["100", "I am at row 1, sample 1.", "-"]]


def test_the_verdicts_appear_once_every_registered_run_is_finished(tmp_path):
    _, report = collapse._study3()
    out = tmp_path / "results_v3"
    _pilot(out, [NOT_SURVIVING, SURVIVING], {})
    (out / "doses.json").write_text(json.dumps({"doses": DOSES}))
    keys = [(a, s) for s in range(4) for a in ORDER_OF_A_SEED]
    for arm, seed in keys:
        _run(out, arm, seed, 0.8, 0.8, success_end=0.4)
    result = report.analyze(out, _book(out, keys), {"doses": DOSES}, plots=False, resamples=100)
    text = BLOCKS["study3-status"](str(out))
    assert _cells(text) == ["**finished**"] * 24 and len(_rows(text, "`d0_s3`")) == 1
    assert "wait for the registered runs" not in text
    assert [line for line in text.splitlines() if line.startswith("- ")] == [
        f"- {line}" for line in result["verdicts"]]
    assert "**G1**" in text and "**G5**" in text
    assert "**Interim**" not in text and "in 0 of 24 assessable finished runs." in text
    answers = BLOCKS["study3-answers"](str(out))
    assert "not finished" not in answers and "**Interim**" not in answers
    assert [line for line in answers.splitlines() if line.startswith("- ")] == [
        f"- {line}" for line in result["verdicts"]]
