"""``benchmarks/smollm2_learning.py`` on a multi-turn run (issue 46, items 3-4) and the blocks it
feeds (``benchmarks/results_pages/countdown.py``), from hand-built run directories: a few
evaluation records and metrics rows, every expected figure worked out by hand below. No model."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

from tests.scripts import load_benchmark

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from results_pages import BLOCKS, countdown  # noqa: E402  (benchmarks/results_pages/)

KWARGS = {"num_count": 2, "max_number": 10, "max_attempts": 3, "read": "last"}
#: env seeds of the preset's Countdown and the problems they draw (checked below): seeds 4 and 10
#: draw the same problem, as the held-out evaluation's repeats do
PROBLEMS = {4: "countdown:8,10->80", 10: "countdown:8,10->80", 0: "countdown:7,9->16",
            1: "countdown:5,6->11", 2: "countdown:3,9->6", 3: "countdown:1,9->10",
            5: "countdown:7,9->2", 6: "countdown:5,6->30", 7: "countdown:7,10->3",
            8: "countdown:4,8->12"}


@pytest.fixture(scope="module")
def sl():
    return load_benchmark("smollm2_learning.py", "smollm2_learning")


def write_run(path: Path, seed: int, before: dict[int, int | None], after: dict[int, int | None],
              rows: dict[int, dict], max_turns: int = 3) -> Path:
    """A run directory: its config, overrides and summary, the step-0 and step-20 evaluation
    files (env seed -> success, None: an env error) and ``metrics.jsonl`` (step -> row)."""
    (path / ".hydra").mkdir(parents=True)
    cfg = {"env": {"id": "ragen2/Countdown-v0", "kwargs": KWARGS, "mix": {}, "eval": {},
                   "heldout_fraction": 0.35},
           "rollout": {"max_turns": max_turns}, "monitor": {"min_samples": 16}}
    (path / ".hydra" / "config.yaml").write_text(yaml.safe_dump(cfg))
    (path / ".hydra" / "overrides.yaml").write_text(
        yaml.safe_dump(["+experiment=smollm2_countdown", f"seed={seed}"]))
    (path / "summary.json").write_text(json.dumps({"seed": seed, "wall_s": 2400.0}))
    (path / "evaluations").mkdir()
    for step, outcomes in ((0, before), (20, after)):
        lines = [json.dumps({"env": "countdown", "env_seed": s, "reward": float(ok or 0),
                             "success": bool(ok), "env_error": None if ok is not None else "boom"})
                 for s, ok in outcomes.items()]
        (path / "evaluations" / f"step_{step:06d}.jsonl").write_text("\n".join(lines) + "\n")
    with open(path / "metrics.jsonl", "w") as f:
        for step, row in sorted(rows.items()):
            f.write(json.dumps({"step": step, **row}) + "\n")
    return path


def eval_rows(success: tuple[float, float], turns: tuple[float, float]) -> dict[int, dict]:
    return {0: {"eval/success": success[0], "eval/num_turns_mean": turns[0]},
            20: {"eval/success": success[1], "eval/num_turns_mean": turns[1]}}


def instrument_rows() -> dict[int, dict]:
    """Step 0: the evaluation, the probe panel and a diagnosis (a collapse/ key that is no MI
    measurement); step 1: the batch monitor (later turns scored against sampled negatives: no
    floor); step 20: the evaluation, the monitor with only 11 later-turn samples (withheld under
    monitor.min_samples=16, its count kept) and the panel."""
    panel = {"collapse/panel/mi": 0.9, "collapse/panel/mi_lo": 0.5, "collapse/panel/mi_hi": 1.2,
             "collapse/panel/mi_floor": 0.1, "collapse/panel/mi_bound": 2.77,
             "collapse/panel/log_n": 2.77, "collapse/panel/retrieval_acc@1": 0.4,
             "collapse/panel/retrieval_chance@1": 0.0625, "collapse/panel/n_samples": 64,
             "collapse/panel/n_prompts": 16, "collapse/panel/token_entropy": 1.9}
    batch = {"collapse/mi": 0.8, "collapse/mi_floor": 0.05, "collapse/log_n": 1.386,
             "collapse/mi_bound": 1.386, "collapse/retrieval_acc@1": 0.7,
             "collapse/retrieval_chance@1": 0.25, "collapse/n_samples": 32,
             "collapse/n_prompts": 4, "collapse/token_entropy": 2.1,
             "collapse/reasoning_tokens_mean": 59.0}
    turns = {"collapse/turns/mi": 0.6, "collapse/turns/log_n": 2.079,
             "collapse/turns/mi_bound": 2.079, "collapse/turns/retrieval_acc@1": 0.5,
             "collapse/turns/retrieval_chance@1": 0.125, "collapse/turns/n_samples": 32,
             "collapse/turns/n_prompts": 8}
    rows = eval_rows((0.2, 0.6), (2.72, 1.40))
    rows[0] |= panel | {"collapse/diagnosis": 0, "eval/response_tokens_mean": 60.0}
    rows[1] = {"rollout/success": 0.2, "actor/entropy": 2.0, "rollout/response_tokens_mean": 58.0,
               **batch, **turns}
    rows[20] |= ({**batch, "collapse/mi": 1.2, "collapse/reasoning_tokens_mean": 30.0}
                 | {**turns, "collapse/turns/mi": 1.0, "collapse/turns/n_samples": 11}
                 | {**panel, "collapse/panel/mi": 2.0, "collapse/panel/token_entropy": 0.7}
                 | {"actor/entropy": 0.8, "rollout/response_tokens_mean": 20.0,
                    "eval/response_tokens_mean": 18.0})
    return rows


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("runs")
    # seed 1: problem 8,10->80 twice (seeds 4, 10), three more once each; seed 3 errs at the end
    # (its problem is left unpaired). Per problem: 0 -> 1/2, 1 -> 1, 0 -> 1, 0 -> 0.
    one = write_run(tmp / "one", 1, {4: 0, 10: 0, 0: 1, 1: 0, 2: 0, 3: 0},
                    {4: 1, 10: 0, 0: 1, 1: 1, 2: 0, 3: None}, instrument_rows())
    # seed 2: eight problems once each, 0 -> 1 on six of them; turns stay above 1.5
    eight = [0, 1, 2, 3, 5, 6, 7, 8]
    two = write_run(tmp / "two", 2, {s: 0 for s in eight}, {s: int(s not in (7, 8)) for s in eight},
                    eval_rows((0.0, 0.75), (2.9, 2.1)))
    # seed 3: seed 2's run backwards (a loss)
    three = write_run(tmp / "three", 3, {s: int(s not in (7, 8)) for s in eight},
                      {s: 0 for s in eight}, eval_rows((0.75, 0.0), (2.1, 2.9)))
    return {"one": one, "two": two, "three": three}


def test_the_seeds_draw_the_problems_the_tests_assume():
    from ragen2.rollout.envs import make_env

    env = make_env("ragen2/Countdown-v0", KWARGS).unwrapped
    for seed, key in PROBLEMS.items():
        env.reset(seed=seed)
        assert env.problem_key() == key


def test_the_gain_is_paired_over_problems_not_episodes(sl):
    # the docstring's example: p's two episodes 0, 0 -> 1, 0 (+1/2), q's one 1 -> 1 (0)
    p, q = ("countdown", "p"), ("countdown", "q")
    g = sl.paired_over_problems({p: [0.0, 0.0], q: [1.0]}, {p: [1.0, 0.0], q: [1.0]})
    assert g["problems"] == 2 and (g["episodes_before"], g["episodes_after"]) == (3, 3)
    assert g["gain"] == pytest.approx(0.25)  # over episodes it would be 2/3 - 1/3
    assert (g["before"], g["after"]) == (pytest.approx(0.5), pytest.approx(0.75))
    assert (g["improved"], g["worsened"]) == (1, 0)


def test_a_multi_turn_run_over_problems(sl, runs):
    r = sl.summarise(str(runs["one"]))
    p = r["held_out_problems"]
    # four paired problems (seed 3's is unpaired: its episode erred at the end), five episodes
    assert (p["problems"], p["episodes_before"], p["episodes_after"]) == (4, 5, 5)
    assert p["unpaired_problems"] == 1
    assert p["before"] == pytest.approx(1 / 4) and p["after"] == pytest.approx(2.5 / 4)
    assert p["gain"] == pytest.approx((0.5 + 0 + 1 + 0) / 4)  # 0.375
    assert (p["improved"], p["worsened"]) == (2, 0)
    by = {q["problem"]: (q["before"], q["after"], q["episodes_before"]) for q in p["per_problem"]}
    assert by["countdown:8,10->80"] == (0.0, 0.5, 2)
    # no problem got worse, but a resample of 4 problems is all zeros with probability 1/16:
    # the 2.5% end is 0, the interval does not exclude it
    assert p["gain_lo"] == 0.0 and p["gain"] < p["gain_hi"] <= 1.0
    # over episodes paired by seed: 1/5 -> 3/5
    assert r["held_out"]["gain"] == pytest.approx(0.4) and r["held_out"]["problems"] == 5
    t = r["turns"]
    assert (t["before"], t["after"], t["before_step"], t["after_step"]) == (2.72, 1.40, 0, 20)
    assert r["max_turns"] == 3
    assert r["multi_turn_bar"] == {"gain": True, "interval": False, "turns": False,
                                   "passes": False}


def test_the_interval_follows_the_direction(sl, runs):
    up, down = (sl.summarise(str(runs[k]))["held_out_problems"] for k in ("two", "three"))
    assert up["problems"] == down["problems"] == 8
    assert up["gain"] == pytest.approx(0.75) and down["gain"] == pytest.approx(-0.75)
    # 6 of 8 problems at +1: a resample with at most 1 of them in 8 draws is rarer than 2.5%
    assert 0 < up["gain_lo"] < up["gain"] < up["gain_hi"] == 1.0
    assert -1.0 == down["gain_lo"] < down["gain"] < down["gain_hi"] < 0
    assert (up["improved"], down["worsened"]) == (6, 6)


def test_the_instruments_come_from_the_files_and_absent_ones_are_none(sl, runs):
    inst = sl.summarise(str(runs["one"]))["instruments"]
    later = inst["mi"]["later_turns"]
    assert later["first"]["step"] == 1 and later["first"]["mi"] == 0.6
    assert later["first"]["mi_bound"] == 2.079 and later["first"]["retrieval_chance@1"] == 0.125
    assert later["first"]["mi_floor"] is None  # sampled negatives: no permutation null logged
    # 11 samples < monitor.min_samples: the value is withheld, its count kept
    assert later["last"]["step"] == 20 and later["last"]["mi"] is None
    assert later["last"]["n_samples"] == 11
    assert inst["mi"]["later_turn_panel"] == {"first": None, "last": None}
    first = inst["mi"]["first_turn"]  # step 0's collapse/diagnosis is no MI measurement
    assert (first["first"]["step"], first["first"]["mi"], first["last"]["mi"]) == (1, 0.8, 1.2)
    panel = inst["mi"]["first_turn_panel"]
    assert (panel["first"]["step"], panel["first"]["mi_lo"], panel["last"]["mi"]) == (0, 0.5, 2.0)
    assert inst["grounding"]["hook"] is False  # Countdown has no ground hook
    assert inst["grounding"]["later_turns"] == {"first": None, "last": None}
    series = inst["entropy_length"]
    assert series["actor/entropy"] == {"first": {"step": 1, "value": 2.0},
                                       "last": {"step": 20, "value": 0.8}}
    assert series["eval/response_tokens_mean"]["first"] == {"step": 0, "value": 60.0}
    # a run that never logged them: None, never a number
    bare = sl.summarise(str(runs["two"]))["instruments"]
    assert bare["entropy_length"]["collapse/token_entropy"] == {"first": None, "last": None}
    assert bare["mi"]["later_turns"] == {"first": None, "last": None}


def test_the_bar_over_seeds(sl, runs, tmp_path):
    doc = sl.document([str(runs[k]) for k in ("one", "two", "three")])
    assert [r["multi_turn_bar"]["passes"] for r in doc["results"]] == [False, True, False]
    bar = doc["multi_turn_bar"]
    assert (bar["seeds"], bar["passed"], bar["met"]) == ([1, 2, 3], [2], False)
    assert doc["settings"]["command"] == 'make train ARGS="+experiment=smollm2_countdown seed=S"'
    assert sl.bar_over_seeds([doc["results"][1]])["met"] is False  # one seed of the three
    single = write_run(tmp_path / "single", 4, {0: 0}, {0: 1}, eval_rows((0, 1), (1, 1)),
                       max_turns=1)
    r = sl.summarise(str(single))
    assert r["multi_turn_bar"] is None and sl.bar_over_seeds([r]) is None


def _blocks(monkeypatch, path: Path) -> tuple[str, str]:
    monkeypatch.setattr(countdown, "DOC", str(path))
    return (" ".join(BLOCKS["smollm2-countdown"]().split()),
            " ".join(BLOCKS["smollm2-countdown-instruments"]().split()))


def test_the_blocks_say_no_runs_until_the_json_is_committed(monkeypatch, tmp_path):
    for text in _blocks(monkeypatch, tmp_path / "absent.json"):
        assert text.startswith("No runs committed yet")
        assert "--name smollm2_countdown RUN1 RUN2 RUN3" in text


def test_the_blocks_render_the_runs(sl, runs, monkeypatch, tmp_path):
    doc = sl.document([str(runs[k]) for k in ("one", "two", "three")])
    path = tmp_path / "smollm2_countdown.json"
    path.write_text(json.dumps(doc, default=str))
    one = doc["results"][0]["held_out_problems"]
    seeds, inst = _blocks(monkeypatch, path)
    assert (f"| 1 | 0.250 -> 0.625 (episodes 0.200 -> 0.600) | **+0.375 [+0.000, "
            f"+{one['gain_hi']:.3f}]** over 4 problems | 2 / 0 | 2.72 -> 1.40 | no: interval's "
            "low end <= 0, 1.40 turns <= 1.5 |") in seeds
    assert "| 2 | 0.000 -> 0.750 (episodes 0.000 -> 0.750) |" in seeds
    assert "| 6 / 0 | 2.90 -> 2.10 | yes |" in seeds
    assert "| no: gain -0.750 < +0.100, interval's low end <= 0 |" in seeds
    assert "is not met: not by seed 1 and 3" in seeds and "5/8 episodes" in seeds
    assert ("| later-turn MI, batch (nats) | `collapse/turns/mi` | 0.600 -> n/a (n = 11 < 16) "
            "(steps 1, 20) |") in inst
    # not logged at step 1 (a run from before the sampled-negatives floor), withheld with its count at step 20
    assert ("| its floor (permutation null, 95th percentile) | `collapse/turns/mi_floor` | "
            "n/a -> n/a (n = 11 < 16) (steps 1, 20) |") in inst
    assert ("`collapse/turns/retrieval_chance@1` | 0.125 -> n/a (n = 11 < 16) (steps 1, 20) |"
            in inst)
    # seed 2's run logged no instrument: n/a, never a number
    assert ("| later-turn MI, probe panel (nats) | `collapse/panel/turns/mi` | n/a (not measured) "
            "| n/a (not measured) | n/a (not measured) |") in inst
    assert ("`collapse/panel/mi` | 0.900 [0.500, 1.200] -> 2.000 [0.500, 1.200] (steps 0, 20) "
            "| n/a (not measured) |") in inst
    assert "`collapse/turns/grounding/frac` | n/a (the env has no ground hook) |" in inst
    assert "`actor/entropy` | 2.000 -> 0.800 (steps 1, 20) |" in inst
    assert "predates the sampled-negatives floor" in inst


def _archive(run: Path, step: int, episodes: list[tuple[bool, list[str]]]) -> None:
    import gzip

    (run / "rollouts").mkdir(exist_ok=True)
    with gzip.open(run / "rollouts" / f"step_{step:06d}.jsonl.gz", "wt") as fh:
        for ok, replies in episodes:
            fh.write(json.dumps({"step": step, "success": ok, "responses": replies}) + "\n")


def test_where_the_successes_come_from(sl, monkeypatch, tmp_path):
    """Steps 1-2 (the first two) and 3-4 (the last two) of a hand-made archive: a win at the first
    attempt, a win after a retry that changed its equation, a loss repeating itself (two repeats,
    whitespace and the end-of-turn marker aside); step 4 adds one repeat in a two-turn loss."""
    run = write_run(tmp_path / "run", 5, {0: 0}, {0: 1}, eval_rows((0, 1), (2, 2)))
    assert sl.attempts(run) is None  # no archive
    _archive(run, 1, [(True, ["6 + 4 = 10<|im_end|>"]),
                      (True, ["6 + 4 = 24\nbecause", "6 * 4 = 24<|im_end|>"])])
    _archive(run, 2, [(False, ["3 + 9 = 12", "3  + 9 = 12<|im_end|>", "3 + 9 = 12\nagain"])])
    _archive(run, 3, [(True, ["7 + 2 = 9"])])
    _archive(run, 4, [(False, ["1 + 9 = 10", "1 + 9 = 10"]), (False, [""])])
    a = sl.attempts(run)
    assert a["first"] == {"steps": [1, 2], "episodes": 3, "successes": 2, "first_attempt": 1,
                          "after_retry": 1, "retries": 3, "repeated": 2}
    assert a["last"] == {"steps": [3, 4], "episodes": 3, "successes": 1, "first_attempt": 1,
                         "after_retry": 0, "retries": 1, "repeated": 1}
    r = sl.summarise(str(run))
    assert r["attempts"] == a
    doc = {"results": [r], "settings": {"bar_gain": 0.1}}
    path = tmp_path / "doc.json"
    path.write_text(json.dumps(doc, default=str))
    monkeypatch.setattr(countdown, "DOC", str(path))
    text = " ".join(BLOCKS["smollm2-countdown-attempts"]().split())
    assert "| 5 | 1-2 | 2 of 3 | 1 / 1 | 2 of 3 |" in text
    assert "| 5 | 3-4 | 1 of 3 | 1 / 0 | 1 of 1 |" in text
    assert "the first and the last 2 archived steps of each run: no episode of the last steps " \
           "was won after a retry, in any seed" in text


def test_seeds_that_end_alike_are_named(sl, monkeypatch, tmp_path):
    """Seeds 7 and 8 win and lose the same final episodes (8 scoring one loss differently); seed 9
    differs: the block names 7 and 8 only, and says their rewards differ."""
    after = {0: 1, 1: 0, 2: 1}
    a = write_run(tmp_path / "a", 7, {0: 0, 1: 0, 2: 0}, after, eval_rows((0, 0.67), (2, 2)))
    b = write_run(tmp_path / "b", 8, {0: 0, 1: 0, 2: 0}, after, eval_rows((0, 0.67), (2, 2)))
    c = write_run(tmp_path / "c", 9, {0: 0, 1: 0, 2: 0}, {0: 1, 1: 1, 2: 1},
                  eval_rows((0, 1), (2, 2)))
    last = b / "evaluations" / "step_000020.jsonl"
    last.write_text(last.read_text().replace('"env_seed": 1, "reward": 0.0',
                                             '"env_seed": 1, "reward": -0.3'))
    doc = sl.document([str(a), str(b), str(c)])
    fo = [r["final_outcomes"] for r in doc["results"]]
    assert fo[0]["success_digest"] == fo[1]["success_digest"] != fo[2]["success_digest"]
    assert fo[0]["reward_digest"] != fo[1]["reward_digest"] and fo[0]["episodes"] == 3
    path = tmp_path / "doc.json"
    path.write_text(json.dumps(doc, default=str))
    seeds, _ = _blocks(monkeypatch, path)
    assert ("Seeds 7 and 8 end with the same outcome on each of the 3 held-out episodes of their "
            "last evaluation (checked episode by episode): their episode rewards differ, so the "
            "replies do.") in seeds
    assert "Seeds 7, 8" not in seeds and "9 end with" not in seeds
