"""Collapse study 3 as its runner and its analysis implement the registration (README "Study 3";
benchmarks/collapse_study/study3*.py): the order and the commands of its runs, the dose pilot's
rule, and the hypotheses' verdicts on synthetic run folders whose numbers are chosen by hand. No
run is started anywhere here."""

from __future__ import annotations

import importlib
import json
import shutil
import sys
from pathlib import Path

import pytest

from tests.scripts import BENCHMARKS, load_benchmark

STUDY = BENCHMARKS / "collapse_study"
DOSES = {"d0": 0.0, "dlow": 0.003, "dhigh": 0.03}


@pytest.fixture(scope="module")
def s3():
    """study3, study3_analysis and study3_report, imported as run.py imports them."""
    sys.path.insert(0, str(STUDY))
    try:
        return tuple(importlib.import_module(m) for m in ("study3", "study3_analysis",
                                                          "study3_report"))
    finally:
        sys.path.remove(str(STUDY))


@pytest.fixture(scope="module")
def runner():
    return load_benchmark("collapse_study/run.py", "collapse_study_run3")


def _checkpoint(run_dir: Path, step: int, overrides: list[str]) -> None:
    """What an interrupted run leaves: its overrides and a complete checkpoint of ``step``."""
    ckpt = run_dir / "checkpoints" / f"step_{step:06d}"
    ckpt.mkdir(parents=True)
    (ckpt / "trainer_state.json").write_text("{}")
    (run_dir / ".hydra").mkdir()
    (run_dir / ".hydra" / "overrides.yaml").write_text("".join(f"- {x}\n" for x in overrides))


def _doses(out: Path, doses: dict | None = None) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "doses.json").write_text(json.dumps({"doses": doses or DOSES}))


# ------------------------------------------------------------------ order and commands


ORDER_OF_A_SEED = ["d0", "dhigh", "d0_top_p", "dlow", "dlow_top_p", "dhigh_top_p"]


def test_dry_run_prints_every_run_in_the_registered_order(runner, s3, tmp_path, monkeypatch, capsys):
    """No run: --dry-run prints the commands only. Seed-major, d0 and dhigh first within a seed;
    a recorded run is skipped, one with a checkpoint resumes from it."""
    study3 = s3[0]
    out = tmp_path / "results_v3"
    _doses(out)
    # d0 seed 0 finished and recorded; dhigh seed 0 interrupted after its step-30 checkpoint
    done = out / "runs" / "d0_s0"
    done.mkdir(parents=True)
    (done / "summary.json").write_text("{}")
    (out / "results.json").write_text(json.dumps({"runs": [
        {"arm": "d0", "seed": 0, "returncode": 0, "overrides": study3.overrides("d0", 0, DOSES)}]}))
    _checkpoint(out / "runs" / "dhigh_s0", 30, study3.overrides("dhigh", 0, DOSES))
    # d0_top_p seed 0 has a checkpoint of a run with other doses: started again, not resumed
    _checkpoint(out / "runs" / "d0_top_p_s0", 50,
                study3.overrides("d0_top_p", 0, {**DOSES, "d0": 0.01}))
    monkeypatch.setattr(sys, "argv", ["run.py", "--design", "v3", "--dry-run", "--out", str(out),
                                      "--cache-root", str(tmp_path / "cache")])
    assert runner.main() == 0
    lines = [x for x in capsys.readouterr().out.splitlines() if x.startswith("[")]
    assert len(lines) == 24
    got = [(x.split("] ")[1].split(" seed ")[0], int(x.split(" seed ")[1].split(" ")[0]))
           for x in lines]
    assert got == [(arm, seed) for seed in (0, 1, 2, 3) for arm in ORDER_OF_A_SEED]
    assert "(recorded, skipped)" in lines[0]
    assert "(resume from the checkpoint of step 30)" in lines[1]
    tail = lines[1].split("): ", 1)[1].split(" ")
    assert tail[1:] == ["filter=none", "algorithm.entropy_coef=0.03", "seed=0",
                        "trainer.warm_start.seed=0", "trainer.total_steps=100",
                        "trainer.eval_every=10", "trainer.eval_episodes=128", "monitor.every=10",
                        "monitor.panel_contrast=8", "trainer.save_every=10",
                        "trainer.save_rollouts_every=1", "'trainer.loggers=[jsonl]'",
                        "trainer.resume=true", f"hydra.run.dir={out / 'runs' / 'dhigh_s0'}"]
    # the last run of seed 3: top-p (RAGEN-2's filter, kept measuring when a step keeps nothing)
    assert lines[-1].split("): ", 1)[1].split(" ")[1:4] == [
        "filter=ragen2_paper", "trainer.max_skipped_steps=1000", "algorithm.entropy_coef=0.03"]
    assert "(start)" in lines[2] and "trainer.resume=true" not in lines[2]  # other doses


def test_the_runner_records_each_run_and_resumes_an_interrupted_one(s3, tmp_path, monkeypatch):
    """No run: a stand-in replaces the trainer's process. dhigh seed 0 is interrupted (exit 75)
    after its step-10 checkpoint; the next invocation skips d0 and resumes dhigh from it."""
    study3 = s3[0]
    out = tmp_path / "results_v3"
    _doses(out)
    calls = []

    def fake(cmd, log, env, cwd):
        run_dir = Path(next(x for x in cmd if x.startswith("hydra.run.dir=")).split("=", 1)[1])
        calls.append((run_dir.name, "trainer.resume=true" in cmd, env["RAGEN2_CACHE"]))
        arm, seed = run_dir.name.rsplit("_s", 1)
        run_dir.mkdir(parents=True, exist_ok=True)
        if arm == "dhigh" and len(calls) == 2:  # the first attempt: stopped after step 10
            _checkpoint(run_dir, 10, [x for x in cmd[1:-1]])
            (run_dir / "metrics.jsonl").write_text(json.dumps({"step": 10}) + "\n")
            return {"returncode": 75, "wall_s": 5.0, "foreign_cpu_s": 0.0, "foreign_cores": 0.0}
        shutil.rmtree(run_dir)
        _run(out, arm, int(seed), 0.9, 0.8, success_end=0.4)
        return {"returncode": 0, "wall_s": 9.0, "foreign_cpu_s": 0.0, "foreign_cores": 0.0}

    monkeypatch.setattr(study3, "run_watched", fake)
    cache = tmp_path / "cache"
    assert study3.run_study(out, [0], ["d0", "dhigh"], cache, plots=False) == 1  # an interrupted run
    result = json.loads((out / "results.json").read_text())
    assert [(r["arm"], r["returncode"]) for r in result["runs"]] == [("d0", 0), ("dhigh", 75)]
    assert result["missing"]["dhigh_s0"].startswith("exit 75 (interrupted: resumable)")
    assert "- missing `d0_top_p_s0`: not run" in (out / "tables.md").read_text()
    assert study3.run_study(out, [0], ["d0", "dhigh"], cache, plots=False) == 0
    assert calls == [("d0_s0", False, str(cache / "s0" / "ragen2")),
                     ("dhigh_s0", False, str(cache / "s0" / "ragen2")),
                     ("dhigh_s0", True, str(cache / "s0" / "ragen2"))]
    result = json.loads((out / "results.json").read_text())
    assert [(r["arm"], r["returncode"], r["resumed_from"]) for r in result["runs"]] == [
        ("d0", 0, None), ("dhigh", 0, 10)]
    assert "dhigh_s0" not in result["missing"] and len(result["missing"]) == 22


def test_counted_runs_refuse_without_the_pilots_doses(s3, tmp_path):
    study3 = s3[0]
    with pytest.raises(SystemExit, match="doses.json is missing.*--design v3 --pilot"):
        study3.load_doses(tmp_path)
    _doses(tmp_path, {"d0": 0.0, "dlow": 0.03, "dhigh": 0.3})  # at the blow-up of Study 2
    with pytest.raises(SystemExit, match="break the registration"):
        study3.load_doses(tmp_path)
    _doses(tmp_path)
    assert study3.load_doses(tmp_path) == DOSES


def test_every_arm_and_the_pilot_compose_into_a_valid_config(s3):
    """The overrides pass the config's own checks (composed, nothing started)."""
    from ragen2.compose import load_config

    study3 = s3[0]
    for arm in study3.ARMS:
        cfg = load_config(study3.overrides(arm, 2, DOSES))
        assert cfg.algorithm.entropy_coef == DOSES[study3.ARMS[arm][0]]
        assert (cfg.filter.strategy, cfg.filter.value) == (
            ("top_p_softmax", 0.9) if arm.endswith("top_p") else (cfg.filter.strategy, cfg.filter.value))
        assert (cfg.trainer.total_steps, cfg.trainer.eval_every, cfg.monitor.every,
                cfg.monitor.panel_contrast, cfg.seed, cfg.trainer.warm_start.seed) == (100, 10, 10, 8, 2, 2)
    cfg = load_config(study3.pilot_overrides(0.03))
    assert (cfg.seed, cfg.trainer.warm_start.seed, cfg.algorithm.entropy_coef) == (100, 100, 0.03)


# ------------------------------------------------------------------ the pilot


def _pilot_metrics(batch: dict[int, float], evals: dict[int, float]) -> dict[int, dict]:
    rows = {s: {"step": s, "rollout/format_error_rate": v} for s, v in batch.items()}
    for s, v in evals.items():
        rows.setdefault(s, {"step": s})["eval/format_error_rate"] = v
    return rows


def test_early_stop_needs_five_consecutive_steps_above_half(s3):
    study3 = s3[0]
    high = {1: 0.1, 2: 0.6, 3: 0.7, 4: 0.9, 5: 0.6, 6: 0.5, 7: 0.6, 8: 0.8, 9: 0.51, 10: 0.6, 11: 0.7}
    # 2-5 are four above 0.5; 6 is exactly 0.5 (not above); 7-11 are five in a row -> step 11
    assert study3.early_stop(_pilot_metrics(high, {})) == 11
    assert study3.early_stop(_pilot_metrics({k: v for k, v in high.items() if k != 9}, {})) is None


def test_survival_rule_on_hand_made_pilot_outcomes(s3):
    study3 = s3[0]
    evals = {s: 0.05 for s in range(0, 101, 10)}
    batch = {s: 0.2 for s in range(1, 101)}  # exactly 0.20 over 91-100: "at most" survives
    assert study3.survives(_pilot_metrics(batch, evals))["survives"] is True
    late = {**batch, 95: 0.3}  # mean over 91-100 = 0.21
    r = study3.survives(_pilot_metrics(late, evals))
    assert r["survives"] is False and r["batch_91_100"] == pytest.approx(0.21)
    r = study3.survives(_pilot_metrics(batch, {**evals, 50: 0.25}))
    assert r["survives"] is False and "50: 0.250" in r["why"]
    r = study3.survives(_pilot_metrics(batch, {k: v for k, v in evals.items() if k != 70}))
    assert r["survives"] is False and "step(s) 70" in r["why"]


def test_choose_doses_takes_the_first_survivor_and_falls_back(s3):
    study3 = s3[0]
    out = study3.choose_doses([{"coef": 0.1, "survives": False}, {"coef": 0.03, "survives": False},
                               {"coef": 0.01, "survives": True}])
    assert out == {"doses": {"d0": 0.0, "dlow": 0.001, "dhigh": 0.01}, "c_high": 0.01,
                   "c_low": 0.001, "fallback": False}
    assert study3.choose_doses([{"coef": 0.1, "survives": True}])["doses"]["dlow"] == 0.01
    none = study3.choose_doses([{"coef": c, "survives": False} for c in (0.1, 0.03, 0.01, 0.003)])
    assert none["doses"] == {"d0": 0.0, "dlow": 0.0003, "dhigh": 0.003} and none["fallback"]
    with pytest.raises(ValueError, match="candidate 0.03 has no outcome"):
        study3.choose_doses([{"coef": 0.1, "survives": False}, {"coef": 0.01, "survives": True}])


def test_pilot_runs_candidates_in_order_and_writes_the_registered_doses(s3, tmp_path, monkeypatch):
    """No run: a stand-in replaces the trainer and writes each candidate's metrics. 0.1 breaks
    the format (stopped early), 0.03 survives the batch but not a held-out evaluation, 0.01
    survives: c_high 0.01, c_low 0.001, and 0.003 never runs."""
    study3 = s3[0]
    calls = []

    def fake(cmd, log, env, run_dir, stop, every_s=10.0):
        coef = float(next(x for x in cmd if x.startswith("algorithm.entropy_coef=")).split("=")[1])
        calls.append(coef)
        run_dir.mkdir(parents=True, exist_ok=True)
        evals = {s: 0.05 for s in range(0, 101, 10)}
        if coef == 0.1:
            rows = _pilot_metrics({1: 0.1, 2: 0.1, **{s: 0.9 for s in range(3, 8)}}, {0: 0.05})
        else:
            rows = _pilot_metrics({s: 0.1 for s in range(1, 101)},
                                  {**evals, 40: 0.3} if coef == 0.03 else evals)
            (run_dir / "summary.json").write_text("{}")
        (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows.values()))
        stopped = stop(study3._rows(run_dir))
        return (75 if stopped else 0), stopped, 1.0

    monkeypatch.setattr(study3, "run_stoppable", fake)
    assert study3.run_pilot(tmp_path, tmp_path / "cache") == 0
    assert calls == [0.1, 0.03, 0.01]
    doses = json.loads((tmp_path / "doses.json").read_text())
    assert doses["doses"] == {"d0": 0.0, "dlow": 0.001, "dhigh": 0.01} and not doses["fallback"]
    why = [c["why"] for c in doses["pilot"]]
    assert "stopped early" in why[0] and "steps 3-7" in why[0]
    assert "40: 0.300" in why[1]
    assert study3.load_doses(tmp_path) == doses["doses"]


# ------------------------------------------------------------------ the analysis

STEPS = [0, 1, *range(10, 101, 10)]


def _run(out: Path, arm: str, seed: int, g0: float, g_end: float | None, *, success_end: float,
         mi_end: float = 1.0, entropy_end: float = 0.1, checkable: float = 0.95,
         fmt_end: float = 0.05, retrieval_end: float = 0.6) -> None:
    """A finished run folder: grounding g0 at steps 0-80 and g_end at 90 and 100 (None: the
    panel measured 5 checkable reasonings there, under monitor.min_samples = 16, and logged a
    value anyway, which the reader must drop)."""
    d = out / "runs" / f"{arm}_s{seed}"
    d.mkdir(parents=True)
    rows = []
    for s in STEPS:
        late = s >= 90
        row = {"step": s, "rollout/format_error_rate": 0.05}
        if s != 1:
            row.update({"eval/success": success_end if s == 100 else 0.1,
                        "eval/format_error_rate": fmt_end if s == 100 else 0.05,
                        "collapse/panel/turns/grounding/frac": (g_end if late else g0) if (
                            not late or g_end is not None) else 0.9,
                        "collapse/panel/turns/grounding/n_samples": 5 if late and g_end is None else 100,
                        "collapse/panel/turns/grounding/checkable_frac": checkable if s == 100 else 0.95,
                        "collapse/panel/turns/n_samples": 120,
                        "collapse/panel/turns/mi": mi_end if s == 100 else 1.0,
                        "collapse/panel/turns/retrieval_acc@1": retrieval_end if late else 0.6})
        if s >= 1:
            row.update({"collapse/turns/n_samples": 60, "collapse/turns/retrieval_acc@1": 0.5,
                        "collapse/token_entropy": entropy_end if s == 100 else 0.1})
        rows.append(row)
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (d / "summary.json").write_text(json.dumps({"steps": 100}))


def _panel(run_dir: Path, step: int, per_prompt: list[list[float | None]]) -> None:
    """A later-turn panel file: one record per prompt with its samples' grounding verdicts."""
    folder = run_dir / "panel" / "turns"
    folder.mkdir(parents=True, exist_ok=True)
    recs = [{"step": step, "key": k, "env": "frozenlake", "turn": 2, "prompt": f"state {k}",
             "reasoning": [f"I am at row {k}, sample {i}." for i in range(len(g))],
             "answers": ["Down"] * len(g), "grounding": g} for k, g in enumerate(per_prompt)]
    (folder / f"step_{step:06d}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))


def _book(out: Path, keys: list[tuple[str, int]]) -> list[dict]:
    return [{"arm": a, "seed": s, "returncode": 0, "commit": "abc1234", "foreign_cores": 0.5}
            for a, s in keys]


def _verdicts(result: dict) -> dict[str, str]:
    return {h["id"]: h["verdict"] for h in [*result["hypotheses"], *result["g4"]]}


def test_a_collapse_case_gets_the_hand_computed_verdicts(s3, tmp_path):
    """Every run starts at grounding 0.9. Changes by seed 0-3 -- d0: -0.30, -0.15, -0.45,
    -0.05 (median -0.225, all below 0: G1 supported); dhigh: d0's - 0.20 (paired -0.20 every
    seed: G2a supported); dlow: d0's +-0.04 alternating (mean 0: G2b not shown); dhigh_top_p:
    dhigh's + 0.10 (G3a supported); d0_top_p: d0's - 0.10 (G3b contradicted). Success at step
    100 = grounding at step 100 / 2 (rho +1: G4 grounding supported); MI = 1 - grounding (rho -1:
    contradicted); entropy = success (rho +1: "not positive" contradicted)."""
    _, analysis, report = s3
    out = tmp_path / "results_v3"
    d0 = [-0.30, -0.15, -0.45, -0.05]
    changes = {"d0": d0, "dhigh": [c - 0.20 for c in d0],
               "dlow": [c + e for c, e in zip(d0, (0.04, -0.04, 0.04, -0.04))],
               "d0_top_p": [c - 0.10 for c in d0]}
    changes["dhigh_top_p"] = [c + 0.10 for c in changes["dhigh"]]
    changes["dlow_top_p"] = d0
    keys = []
    for arm, cs in changes.items():
        for seed, c in enumerate(cs):
            g = round(0.9 + c, 10)
            # d0 seed 0 (-0.30): fluent, checkable, the format intact -> template collapse;
            # dhigh seed 2 (-0.65): mostly uncheckable at step 100 -> not a template
            _run(out, arm, seed, 0.9, g, success_end=g / 2, mi_end=1 - g, entropy_end=g / 2,
                 checkable=0.5 if (arm, seed) == ("dhigh", 2) else 0.95)
            keys.append((arm, seed))
    # d0 seed 0's panel files: every prompt right at step 0; at 90 and 100 prompt 0 right
    # throughout and prompts 1-3 wrong (prompt 2's second sample not checkable) -> the
    # per-prompt changes are 0 and -1
    d = out / "runs" / "d0_s0"
    _panel(d, 0, [[1.0, 1.0]] * 4)
    for step in (90, 100):
        _panel(d, step, [[1.0, 1.0], [0.0, 0.0], [0.0, None], [0.0, 0.0]])
    result = report.analyze(out, _book(out, keys), {"doses": DOSES}, plots=False, resamples=500)
    v = _verdicts(result)
    assert {k: v[k] for k in ("G1", "G2a", "G2b", "G3a", "G3b")} == {
        "G1": "supported", "G2a": "supported", "G2b": "not shown", "G3a": "supported",
        "G3b": "contradicted"}
    h = {x["id"]: x for x in result["hypotheses"]}
    assert h["G1"]["effect"] == pytest.approx(-0.225)
    assert h["G2a"]["effect"] == pytest.approx(-0.20) and h["G2a"]["n_below"] == 4
    assert h["G2a"]["lo"] == pytest.approx(-0.20) and h["G2a"]["hi"] == pytest.approx(-0.20)
    assert h["G2b"]["effect"] == pytest.approx(0.0, abs=1e-9)
    assert h["G3b"]["effect"] == pytest.approx(-0.10)
    g4 = {x["id"]: x for x in result["g4"]}
    assert g4["G4 grounding"]["effect"] == pytest.approx(1.0) and g4["G4 grounding"]["n"] == 24
    assert (v["G4 grounding"], v["G4 panel_mi"], v["G4 token_entropy"]) == (
        "supported", "contradicted", "contradicted")
    assert v["G4 panel_retrieval"] == "no verdict (no prediction)"
    per = {r["key"]: r for r in result["per_run"]}
    assert per["d0_s0"]["template_collapse"] is True
    # its interval over the panel's prompts: draws of all-right prompts give 0, of all-wrong -1
    assert -1.0 <= per["d0_s0"]["grounding_lo"] < per["d0_s0"]["grounding_hi"] <= 0.0
    examples = (out / "examples.md").read_text()
    assert "## largest fall of grounding: dhigh seed 2" in examples  # -0.65
    assert "## smallest fall (or largest rise) of grounding: d0 seed 3" in examples  # -0.05 first
    assert "retrieval missed the drift (G5): d0 seed 0" in examples
    assert "    - [0] I am at row 1, sample 0." in examples and "    - [-] I am at row 2, sample 1." in examples
    # the prompts shown are the three whose grounding fell (1, 2, 3), not prompt 0 (no fall)
    assert "row 0" not in examples
    assert examples.index("row 1, sample 0") < examples.index("row 2, sample 0") < \
        examples.index("row 3, sample 0")
    assert per["dhigh_s2"]["template_collapse"] is False and "checkable 0.50" in \
        per["dhigh_s2"]["template_collapse_why"]
    assert per["d0_s3"]["template_collapse"] is False  # -0.05: no drift
    # G5: retrieval@1 on the panel did not move (0.6 throughout): every grounding fall of 0.20
    # or more was missed by it
    missed = sorted(f"{a}/{s}" for a, cs in changes.items() for s, c in enumerate(cs) if c <= -0.2)
    assert sorted(result["g5"]["retrieval_missed"]) == missed
    assert result["missing"] == {} and "## Runs: 24 of 24 registered finished" in (
        out / "tables.md").read_text()
    text = (out / "tables.md").read_text()
    assert "**G2a** (dose: dhigh against d0" in text and ": **supported**" in text


def test_a_no_collapse_case_names_missing_runs_and_arms_without_reasoning(s3, tmp_path):
    """Grounding holds (changes +0.02, -0.02, +0.01, -0.01 in every arm: G1 and G2b not shown).
    dhigh seeds 1 and 2 have no reasoning left (5 checkable reasonings at steps 90 and 100, under
    the 16 of monitor.min_samples, their logged values dropped): the arm gets "no data" on G2a
    and G3a, and the runs are named. dlow seed 3 never ran: missing, named, and its pair's seed
    is left out of G2b by name. Success is the same in every run: G4 has no rho (no data)."""
    _, analysis, report = s3
    out = tmp_path / "results_v3"
    small = [0.02, -0.02, 0.01, -0.01]
    keys = []
    for arm in ORDER_OF_A_SEED:
        for seed, c in enumerate(small):
            if (arm, seed) == ("dlow", 3):
                continue
            gone = arm == "dhigh" and seed in (1, 2)
            _run(out, arm, seed, 0.8, None if gone else round(0.8 + c, 10), success_end=0.4)
            keys.append((arm, seed))
    result = report.analyze(out, _book(out, keys), {"doses": DOSES}, plots=False, resamples=500)
    v = _verdicts(result)
    assert {k: v[k] for k in ("G1", "G2a", "G2b", "G3a", "G3b")} == {
        "G1": "not shown", "G2a": "no data", "G2b": "not shown", "G3a": "no data",
        "G3b": "not shown"}
    h = {x["id"]: x for x in result["hypotheses"]}
    assert h["G1"]["effect"] == pytest.approx(0.0, abs=1e-9)  # median of +-0.01, +-0.02
    assert "dhigh have 2 or more runs with no reasoning left" in h["G2a"]["why_no_data"]
    assert h["G2a"]["dropped"]["dhigh/1"].startswith("no reasoning left")
    assert result["no_reasoning_left"]["dhigh"] == [1, 2] and result["no_data_arms"] == ["dhigh"]
    assert result["missing"] == {"dlow_s3": "not run"}
    assert h["G2b"]["n"] == 3 and h["G2b"]["dropped"] == {"dlow/3": "missing run: not run",
                                                          "d0/3": "no dlow run of seed 3"}
    assert v["G4 grounding"] == "no data" and result["g4"][0]["n"] == 21  # 23 runs - 2 left out
    per = {r["key"]: r for r in result["per_run"]}
    assert per["dhigh_s1"]["grounding_change"] is None and per["dhigh_s1"]["no_reasoning_left"]
    assert "withheld at step 90 (n = 5 samples" in per["dhigh_s1"]["grounding_change_why"]
    assert not any(r["template_collapse"] for r in per.values())
    text = (out / "tables.md").read_text()
    assert "- missing `dlow_s3`: not run" in text and "## Runs: 23 of 24 registered finished" in text
    assert "**Template collapse** (grounding change <= -0.2" in text and "in no run" in text


def test_a_runs_grounding_change_has_an_interval_over_the_panels_prompts(s3):
    analysis = s3[1]
    # every prompt: all 4 samples right at step 0, 2 of 4 at steps 90 and 100 -> -0.5 exactly
    same = {0: {k: [1.0] * 4 for k in range(8)},
            90: {k: [1.0, 0.0, 1.0, 0.0] for k in range(8)},
            100: {k: [0.0, 1.0, None, 0.0, 1.0] for k in range(8)}}  # None: not checkable
    assert analysis.change_interval(same, 500) == pytest.approx((-0.5, -0.5))
    mixed = {0: {k: [1.0] * 4 for k in range(8)},
             90: {k: [float(k % 2)] * 4 for k in range(8)},
             100: {k: [float(k % 2)] * 4 for k in range(8)}}
    lo, hi = analysis.change_interval(mixed, 500)
    assert -1.0 <= lo < -0.5 < hi <= 0.0  # the change is -0.5; prompts differ (0 or -1)
    assert analysis.change_interval({0: same[0], 90: same[90]}) == (None, None)


def test_rho_interval_on_hand_made_points(s3):
    analysis = s3[1]
    r = analysis.rho_interval([(1, 2), (2, 4), (3, 6), (4, 8)], 300)
    assert (r["rho"], r["lo"], r["hi"]) == pytest.approx((1.0, 1.0, 1.0))
    # ranks x 1,2,3,4 against y 2,1,4,3: rho = 1 - 6 * 4 / (4 * 15) = 0.6
    assert analysis.rho_interval([(1, 2), (2, 1), (3, 4), (4, 3)], 300)["rho"] == pytest.approx(0.6)
    assert analysis.rho_interval([(1, 1), (2, 1), (3, 1)])["rho"] is None


def test_examples_pick_the_prompts_whose_grounding_fell_most(s3):
    """_largest_falls: per prompt, the grounded fraction of its checkable samples at the last
    step minus at the first; a prompt with nothing checkable at either step counts as no fall;
    ties keep the panel's order."""
    _, _, report = s3
    verdicts = {0: {"a": [1.0, 1.0], "b": [1.0, 1.0], "c": [1.0, 0.0], "d": [1.0, 1.0],
                    "e": [None, None]},
                100: {"a": [1.0, 1.0], "b": [0.0, 1.0], "c": [0.0, 0.0], "d": [0.0, None],
                      "e": [0.0, 0.0]}}
    # falls: a 0, b -0.5, c -0.5, d -1, e none (0)
    assert report._largest_falls(verdicts, 0, 100) == ["d", "b", "c"]
    assert report._largest_falls(verdicts, 0, 100, k=5) == ["d", "b", "c", "a", "e"]


def test_sentence_form_kept_masks_numbers_and_nothing_else(s3, tmp_path):
    """sentence_form_kept: step 0 writes two forms (directions Down and Right, 10 samples each)
    and one slip ("starts 2", 1 of 21: under 5%, not a form of the warm start); at the last step
    a sample that only changes numbers keeps its form, one that writes "starts 2" or drops a
    sentence does not, and an empty reasoning counts against it: 2 of 5 kept."""
    _, _, report = s3
    d = tmp_path / "run"
    folder = d / "panel" / "turns"
    folder.mkdir(parents=True)
    start = (["I am at row 2, column 1. The shortest safe path starts Down."] * 10
             + ["I am at row 1, column 3. The shortest safe path starts Right."] * 10
             + ["I am at row 1, column 3. The shortest safe path starts 3."])
    end = ["I am at row 3, column 1.  The shortest safe path starts Down.",  # numbers, spaces
           "I am at row 4, column 4. The shortest safe path starts Right.",
           "I am at row 4, column 4. The shortest safe path starts 2.",
           "I am at row 4, column 4.",
           ""]
    for step, texts in ((0, start), (10, ["unused"]), (100, end)):
        rec = {"step": step, "key": 7, "env": "frozenlake", "turn": 2, "prompt": "s",
               "reasoning": texts, "answers": ["Down"] * len(texts)}
        (folder / f"step_{step:06d}.jsonl").write_text(json.dumps(rec) + "\n")
    assert report.sentence_form_kept(d) == {"step": 100, "kept": 2, "of": 5, "frac": 0.4}
    (folder / "step_000010.jsonl").unlink()
    (folder / "step_000100.jsonl").unlink()
    assert report.sentence_form_kept(d) is None  # one panel step: nothing to compare


def _r(change: float | None, collapse: bool | None) -> dict:
    return {"grounding_change": change, "template_collapse": collapse}


def _hand_made_filter_runs() -> tuple[dict, set]:
    """Seed 3: d0 -0.1 / d0_top_p -0.5 (collapse), dlow 0.0 / dlow_top_p -0.3 -> d = -0.4,
    -0.3; seed 4: d0 -0.2 / d0_top_p -0.1 -> d = +0.1, dhigh without a change (n/a) beside
    dhigh_top_p -0.3 -> no pair; seed 9: dlow -0.1 beside a dlow_top_p with no reasoning left
    -> no pair."""
    runs = {("d0", 3): _r(-0.1, False), ("d0_top_p", 3): _r(-0.5, True),
            ("dlow", 3): _r(0.0, False), ("dlow_top_p", 3): _r(-0.3, True),
            ("d0", 4): _r(-0.2, False), ("d0_top_p", 4): _r(-0.1, False),
            ("dhigh", 4): _r(None, None), ("dhigh_top_p", 4): _r(-0.3, True),
            ("dlow", 9): _r(-0.1, False), ("dlow_top_p", 9): _r(None, None)}
    for (arm, seed), r in runs.items():
        r.update(arm=arm, seed=seed)
    return runs, {("dlow_top_p", 9)}


def test_the_filter_over_doses_pairs_within_a_seed_and_resamples_seeds(s3):
    """Per seed: 3 -> mean(-0.4, -0.3) = -0.35, 4 -> +0.1; effect mean(-0.35, +0.1) = -0.125;
    3 pairs, 2 below 0 and 1 above. The interval lies between the two seeds' values (a bootstrap
    of their mean)."""
    _, analysis, _ = s3
    runs, left = _hand_made_filter_runs()
    f = analysis.filter_over_doses(runs, left, resamples=500)
    assert f["per_seed"] == pytest.approx({3: -0.35, 4: 0.1})
    assert f["pairs"] == pytest.approx({"d0/3": -0.4, "dlow/3": -0.3, "d0/4": 0.1})
    assert f["effect"] == pytest.approx(-0.125)
    assert (f["n_seeds"], f["n_pairs"], f["n_below"], f["n_above"]) == (2, 3, 2, 1)
    assert -0.35 - 1e-9 <= f["lo"] <= f["hi"] <= 0.1 + 1e-9
    by_arm = analysis.collapse_by_arm(runs)
    assert by_arm["d0_top_p"] == {"yes": [3], "no": [4], "n/a": []}
    assert by_arm["dhigh"] == {"yes": [], "no": [], "n/a": [4]}
    assert by_arm["dlow"] == {"yes": [], "no": [3, 9], "n/a": []}


def test_the_three_questions_are_answered_from_the_evaluation(s3):
    """The answers' counts, table cells and registered effects come from the evaluation: 3 of 8
    assessable runs collapse (dhigh/4 and dlow_top_p/9 not assessable); the table's d0 row reads
    0 of 2 without a filter and 1 of 2 (seed 3) with top-p."""
    _, analysis, report = s3
    runs, left = _hand_made_filter_runs()
    hyps = [{"id": hid, "arm": arm, "baseline": base, "effect": e, "lo": e - 0.1, "hi": e + 0.1,
             "n": 2, "verdict": v}
            for hid, arm, base, e, v in (("G1", "d0", None, -0.15, "supported"),
                                         ("G2a", "dhigh", "d0", -0.2, "supported"),
                                         ("G2b", "dlow", "d0", 0.05, "not shown"),
                                         ("G3a", "dhigh_top_p", "dhigh", 0.0, "not shown"),
                                         ("G3b", "d0_top_p", "d0", -0.15, "contradicted"))]
    runs[("d0_top_p", 3)]["diagnosis_steps"] = [90, 100]  # caught by the MI diagnosis
    for i, key in enumerate((("d0_top_p", 3), ("dlow_top_p", 3), ("dhigh_top_p", 4))):
        runs[key].update(grounding_before=0.9, grounding_after=[0.5, 0.4 - i / 10],
                         instruments={"panel_mi": [1.6, 0.1 * i], "token_entropy": [0.1, None]})
    runs[("d0", 4)].update(diagnosis_steps=[50], alert_steps=[60])  # flagged, no collapse
    ev = {"hypotheses": hyps, "collapse_by_arm": analysis.collapse_by_arm(runs),
          "runs": runs,
          "filter_over_doses": analysis.filter_over_doses(runs, left, resamples=200)}
    text = "\n\n".join(report.answers(ev, {"d0": 0.0, "dlow": 0.001, "dhigh": 0.01}, True))
    assert text.startswith("**Interim**")
    assert "in 3 of 8 assessable finished runs (d0_top_p/3, dlow_top_p/3, dhigh_top_p/4); " \
           "not assessable in dlow_top_p/9, dhigh/4." in text
    assert "| d0 (0) | 0 of 2 | 1 of 2 (seed 3) |" in text
    assert "| dhigh (0.01) | 0 of 0, 1 not assessable | 1 of 1 (seed 4) |" in text
    assert "G1 (median change) -0.150 [-0.250, -0.050] over 2 runs: **supported**" in text
    assert "G3b (d0_top_p - d0) -0.150 [-0.250, -0.050] over 2 seeds: **contradicted**" in text
    assert "mean over seeds -0.125" in text and "(3 dose-seed pairs, 2 below 0 and 1 above)" in text
    assert "template collapse in 3 of 4 assessable top-p runs and 0 of 4 unfiltered ones" in text
    assert "template collapse at some step in 1 of the 3 runs with template collapse by the " \
           "grounding rule (d0_top_p/3) and in 1 other finished runs (d0/4); the collapse alert " \
           "fired in 1 (d0/4)" in text
    assert "| run | grounding | diagnosis flagged at | panel_mi | token_entropy |" in text
    assert "| d0_top_p/3 | 0.90 -> 0.40 | 90, 100 | 1.60 -> 0.00 | 0.10 -> - |" in text
    assert "| dhigh_top_p/4 | 0.90 -> 0.20 | never | 1.60 -> 0.20 | 0.10 -> - |" in text
    assert not "\n\n".join(report.answers(ev, {}, False)).startswith("**Interim**")


def test_run_time_flags_read_the_diagnosis_code_and_the_alert(s3):
    """Template collapse is diagnosis code 1 (ragen2.collapse.diagnosis.DIAGNOSIS_CODES); codes
    0, 2 and 3 and missing values are not; an alert counts when above 0."""
    _, analysis, _ = s3
    from ragen2.collapse.diagnosis import DIAGNOSIS_CODES

    assert analysis.TEMPLATE_CODE == DIAGNOSIS_CODES["template_collapse"]
    m = {0: {"collapse/diagnosis": 3.0, "collapse/alert": 0.0}, 10: {"collapse/diagnosis": 1.0},
         20: {"collapse/diagnosis": 2.0, "collapse/alert": 1.0}, 30: {"collapse/diagnosis": 1.0},
         40: {"collapse/diagnosis": None}, 50: {}}
    assert analysis.run_time_flags(m) == {"diagnosis_steps": [10, 30], "alert_steps": [20]}


def test_the_sweep_page_holds_the_finished_counted_runs_by_arm(s3, tmp_path):
    """Three finished runs (d0 seeds 0 and 1, d0_top_p seed 0) make two arms of the report, one
    per (filter, entropy_coef) as the runs' own overrides name them; a run folder without a
    record (in progress) is left out."""
    study3, _, report = s3
    out = tmp_path / "results_v3"
    keys = [("d0", 0), ("d0", 1), ("d0_top_p", 0)]
    for arm, seed in [*keys, ("dhigh", 0)]:
        _run(out, arm, seed, 0.9, 0.6, success_end=0.4)
        hydra = out / "runs" / f"{arm}_s{seed}" / ".hydra"
        hydra.mkdir()
        (hydra / "overrides.yaml").write_text("".join(
            f"- {o}\n" for o in study3.overrides(arm, seed, DOSES)))
    html = report.sweep_page(out, _book(out, keys)).read_text()
    arms = html.split("Curves per arm")[0]
    assert arms.count("<td>filter=none algorithm.entropy_coef=0.0</td>") == 1
    assert arms.count("<td>filter=ragen2_paper algorithm.entropy_coef=0.0</td>") == 1
    assert "d0_s1" in html and "dhigh_s0" not in html and "entropy_coef=0.03" not in html
    with pytest.raises(ValueError, match="no finished counted run"):
        report.sweep_page(out, [])
