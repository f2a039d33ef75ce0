"""ragen2-analyze: run-dir readers, per-step plug-in MI, diagnosis, plots and the CLI.

Fixture runs: 3 saved steps x 4 groups x 2 episodes. "informative" reasoning names its input
(its own numbers per env seed), "template" reasoning is one text for every input. Hand-checked
numbers (8 pairs, 4 inputs of 2 episodes each):
    informative: 4 clusters = inputs -> I_raw = H(X) = log 4 = 1.386294; Miller-Madow adds
                 (m_x + m_c - m_xc - 1) / (2n) = (4 + 4 - 4 - 1) / 16 = 0.1875 -> 1.573794
    template:    1 cluster -> I_raw = 0; correction (4 + 1 - 4 - 1) / 16 = 0 -> 0
    rewards 0 and 1 in every group -> within-group population std 0.5
"""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import pytest

from ragen2.analysis import load_metrics, load_rollouts
from ragen2.analysis.analyze import main, plugin_step

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
LOG4 = math.log(4)

# RL steps 1..3, entropy stays at >= 0.8 of its step-1 value; train success mean 0.6, held-out 0.55
BASE_METRICS = [
    {"step": 0, "eval/success": 0.3},
    {"step": 1, "rollout/success": 0.5, "actor/entropy": 1.0, "rollout/group_reward_std_mean": 0.5},
    {"step": 2, "rollout/success": 0.6, "actor/entropy": 0.95, "rollout/group_reward_std_mean": 0.5},
    {"step": 3, "rollout/success": 0.7, "actor/entropy": 0.9, "eval/success": 0.55},
]


def _reasoning(kind: str, seed: int) -> str:
    if kind == "template":
        return "i will think step by step and then move right"
    return f"seed {seed} puts walls at {seed} {seed + 1} {seed + 2} and the goal at {seed + 3} {seed + 4}"


def _episodes(step: int, kind: str) -> list[dict]:
    eps = []
    for g in range(4):
        seed = 100 * step + 10 * g
        for e in range(2):
            reasoning = None if kind == "empty_half" and g >= 2 else _reasoning(kind, seed)
            eps.append({"step": step, "group_id": g, "env": "frozenlake", "env_seed": seed,
                        "prompt": f"grid {seed}", "reasoning": reasoning, "responses": ["<answer>"],
                        "actions": ["right"], "reward": float(e), "success": bool(e), "kept": g != 3})
    return eps


def _write_gz(path: Path, episodes: list[dict]) -> None:
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.write("".join(json.dumps(ep) + "\n" for ep in episodes))


def _write_metrics(run: Path, rows: list[dict]) -> None:
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def make_run(root: Path, kind: str = "informative", metrics: list[dict] | None = BASE_METRICS,
             steps=(1, 2, 3)) -> Path:
    run = root / f"run_{kind}"
    (run / "rollouts").mkdir(parents=True)
    # 8 episodes a step: under the default minimum sample of an MI value (monitor.min_samples)
    (run / ".hydra").mkdir()
    (run / ".hydra" / "config.yaml").write_text("monitor:\n  min_samples: 2\n")
    for s in steps:
        _write_gz(run / "rollouts" / f"step_{s:06d}.jsonl.gz", _episodes(s, kind))
    if metrics is not None:
        _write_metrics(run, metrics)
    return run


@pytest.fixture
def no_plots(monkeypatch):
    """Skip the PNGs (about 0.5 s a run) in tests that only check numbers."""
    monkeypatch.setattr("ragen2.analysis.plots.write_plots", lambda *a: ({}, {}))


def run_cli(run: Path, *extra: str) -> dict:
    assert main([str(run), *extra]) == 0
    return json.loads((run / "analysis" / "analysis.json").read_text())


def assert_png(path: str | Path) -> None:
    data = Path(path).read_bytes()
    assert data[:8] == PNG_MAGIC and len(data) > 1000, path


# ---------------------------------------------------------------------------------- readers
def test_load_metrics_last_row_wins_and_nulls_drop(tmp_path):
    (tmp_path / "metrics.jsonl").write_text(
        '{"step": 0, "eval/success": 0.1}\n'
        '{"step": 1, "rollout/success": 0.2, "actor/entropy": 1.0}\n'
        "\n"
        '{"step": 2, "rollout/success": 0.3, "actor/entropy": NaN}\n'
        '{"step": 1, "rollout/success": 0.9, "collapse/mi": null}\n'  # resumed run rewrote step 1
    )
    m = load_metrics(tmp_path)
    assert list(m) == [0, 1, 2]
    assert m[1] == {"step": 1, "rollout/success": 0.9}  # the whole last row, not a merge
    assert m[2] == {"step": 2, "rollout/success": 0.3}  # NaN reads as missing


@pytest.mark.parametrize("line, why", [
    ('{"step": 1, "rollout/success": 0.', "not valid JSON"),
    ('[1, 2]', "expected a JSON object"),
    ('{"rollout/success": 0.5}', 'non-integer "step"'),
])
def test_load_metrics_corrupt_line_names_file_and_line(tmp_path, line, why):
    (tmp_path / "metrics.jsonl").write_text('{"step": 0}\n{"step": 1}\n' + line + '\n{"step": 2}\n')
    with pytest.raises(ValueError, match=r"metrics\.jsonl:3: ") as e:
        load_metrics(tmp_path)
    assert why in str(e.value)


def test_load_metrics_skips_a_partial_last_line(tmp_path):
    """A run killed mid-write leaves half a line at the end: warned about and skipped."""
    (tmp_path / "metrics.jsonl").write_text('{"step": 0}\n{"step": 1, "rollout/success": 0.')
    with pytest.warns(RuntimeWarning, match="metrics.jsonl:2: partial last line skipped"):
        assert list(load_metrics(tmp_path)) == [0]


def test_load_rollouts_skips_truncated_and_garbage_files(tmp_path):
    run = make_run(tmp_path, steps=(1, 2, 3, 4))
    gz = run / "rollouts" / "step_000002.jsonl.gz"
    gz.write_bytes(gz.read_bytes()[:60])  # killed mid-write
    (run / "rollouts" / "step_000004.jsonl.gz").write_bytes(b"not gzip at all")
    (run / "rollouts" / "notes.txt").write_text("ignored")
    with pytest.warns(RuntimeWarning) as rec:
        ro = load_rollouts(run)
    assert list(ro) == [1, 3]
    assert len(ro[1]) == 8 and ro[3][0]["env_seed"] == 300
    msgs = sorted(str(w.message) for w in rec)
    assert len(msgs) == 2
    assert "step_000002.jsonl.gz" in msgs[0] and "step_000004.jsonl.gz" in msgs[1]


def test_load_rollouts_skips_file_missing_a_key(tmp_path):
    run = make_run(tmp_path, steps=(1,))
    eps = _episodes(2, "informative")
    del eps[5]["env_seed"]
    _write_gz(run / "rollouts" / "step_000002.jsonl.gz", eps)
    with pytest.warns(RuntimeWarning, match=r"step_000002.*line 6: missing key\(s\) env_seed"):
        assert list(load_rollouts(run)) == [1]


def test_load_rollouts_without_folder_is_empty(tmp_path):
    assert load_rollouts(tmp_path) == {}


# ---------------------------------------------------------------------------------- plug-in step
def test_plugin_step_informative_vs_template():
    info = plugin_step(1, _episodes(1, "informative"), min_samples=2)
    assert info["n_inputs"] == 4 and info["n_clusters"] == 4
    assert info["mi_raw"] == pytest.approx(LOG4)
    assert info["mi"] == pytest.approx(LOG4 + 3 / 16)
    assert info["h_cond"] == pytest.approx(0.0, abs=1e-12)
    assert info["distinct_reasoning_share"] == 0.5
    assert info["reward_spread"] == pytest.approx(0.5)
    assert info["success"] == 0.5 and info["kept_share"] == 0.75
    assert info["mi_floor_mean"] < info["mi_floor_q95"] < info["mi"]
    assert info["log_n_inputs"] == pytest.approx(LOG4)

    tmpl = plugin_step(1, _episodes(1, "template"), min_samples=2)
    assert tmpl["n_clusters"] == 1
    assert tmpl["mi_raw"] == pytest.approx(0.0, abs=1e-12)
    assert tmpl["mi"] == pytest.approx(0.0, abs=1e-12)
    assert tmpl["mi_floor_q95"] == pytest.approx(0.0, abs=1e-12)
    assert tmpl["distinct_reasoning_share"] == 1 / 8


def test_plugin_step_null_reasoning_is_its_own_cluster():
    # inputs 0, 1 -> own clusters; inputs 2, 3 -> null -> one "empty" cluster (p = 1/4, 1/4, 1/2)
    # I_raw = H(C) - H(C|X) = H(C) - 0 = 1.5 log 2
    rec = plugin_step(1, _episodes(1, "empty_half"), min_samples=2)
    assert rec["n_empty_reasoning"] == 4 and rec["n_clusters"] == 3
    assert rec["mi_raw"] == pytest.approx(1.5 * math.log(2))


# ---------------------------------------------------------------------------------- CLI: analysis
def test_template_run_is_template_collapse_with_plots(tmp_path, capsys):
    run = make_run(tmp_path, "template")
    out = run_cli(run)
    assert out["rollout_steps"] == [1, 2, 3] and out["metric_steps"] == 4
    assert [r["mi"] for r in out["steps"]] == pytest.approx([0, 0, 0], abs=1e-12)
    d = out["diagnosis"]
    assert (d["label"], d["code"]) == ("template_collapse", 1)
    # excess 0 < 0.1 log 4; entropy 0.9 >= 0.8 x 1.0 (step 1, the first RL step)
    assert d["inputs"] == pytest.approx({"mi": 0.0, "mi_null": 0.0, "log_n": LOG4, "token_entropy": 0.9,
                                         "entropy_ref": 1.0, "train_success": 0.6,
                                         "eval_success": 0.55}, abs=1e-12)
    assert d["sources"]["mi"] == "plug-in MI (Miller-Madow) at step 3"
    assert set(out["plots"]) == {"success", "mi", "conditional_entropy", "token_entropy",
                                 "reward_spread", "overview"}
    for path in out["plots"].values():
        assert_png(path)
    assert "snr" in out["skipped_plots"] and not (run / "analysis" / "snr.png").exists()
    text = capsys.readouterr().out
    assert "| step | train success |" in text
    assert "| 3 | 0.700 | 0.550 | — | 0.000 |" in text
    assert "diagnosis: template_collapse: template collapse: MI 0 nats" in text
    assert "snr plot skipped" in text and "online MI monitor did not run" in text


def test_informative_run_is_healthy(tmp_path, no_plots):
    out = run_cli(make_run(tmp_path, "informative"))
    last = out["steps"][-1]
    assert last["mi_raw"] == pytest.approx(LOG4) and last["mi"] == pytest.approx(LOG4 + 3 / 16)
    d = out["diagnosis"]
    assert d["label"] == "healthy"
    assert d["inputs"]["mi"] == pytest.approx(LOG4 + 3 / 16)
    assert d["inputs"]["mi_null"] == pytest.approx(last["mi_floor_mean"])


def test_template_with_falling_entropy_is_not_template_collapse(tmp_path, no_plots):
    rows = [dict(r) for r in BASE_METRICS]
    rows[3]["actor/entropy"] = 0.5  # < 0.8 x 1.0
    d = run_cli(make_run(tmp_path, "template", rows))["diagnosis"]
    assert d["label"] == "healthy"
    assert "low MI but not template collapse" in d["evidence"]


def test_online_monitor_takes_precedence_and_all_panels(tmp_path):
    rows = [dict(r) for r in BASE_METRICS]
    for r, mi in zip(rows[1:], (0.9, 0.3, 0.01)):
        r.update({"collapse/mi": mi, "collapse/mi_null": 0.005, "collapse/h_cond": 40.0,
                  "snr/mean": 1.0, "snr/std": 0.3, "snr/frac_high": 0.4, "snr/frac_low": 0.2})
    out = run_cli(make_run(tmp_path, "informative", rows))  # plug-in MI stays high
    d = out["diagnosis"]
    assert d["label"] == "template_collapse"
    assert d["inputs"]["mi"] == 0.01 and d["inputs"]["mi_null"] == 0.005
    assert d["inputs"]["log_n"] == pytest.approx(LOG4)  # distinct inputs in step 3's rollouts
    assert d["sources"]["mi"] == "collapse/mi at step 3"
    assert out["skipped_plots"] == {}
    assert_png(out["plots"]["snr"])


def test_later_turn_panel_is_the_diagnosis_instrument_where_logged(tmp_path):
    """FrozenLake's first-turn MI sits at its floor by construction; the later-turn panel moves."""
    rows = [dict(r) for r in BASE_METRICS]
    for r, mi in zip(rows[1:], (0.9, 0.3, 0.01)):
        r.update({"collapse/mi": 0.001, "collapse/mi_null": 0.001, "collapse/panel/turns/mi": mi,
                  "collapse/panel/turns/mi_null": 0.004, "collapse/panel/turns/log_n": 3.0})
    d = run_cli(make_run(tmp_path / "a", "informative", rows))["diagnosis"]
    assert d["inputs"]["mi"] == 0.01 and d["inputs"]["mi_null"] == 0.004
    assert d["inputs"]["log_n"] == 3.0
    assert d["sources"]["mi"] == "collapse/panel/turns/mi at step 3"


def test_train_window_and_entropy_reference(tmp_path, no_plots):
    rows = [{"step": 0, "actor/entropy": 5.0, "eval/success": 0.1}]  # step 0 is not the reference
    for s, succ in enumerate([0.0, 0.0, 0.2, 0.4, 0.6, 0.8, 1.0], start=1):
        rows.append({"step": s, "rollout/success": succ, "actor/entropy": 2.0 - 0.1 * s})
    d = run_cli(make_run(tmp_path, "template", rows))["diagnosis"]
    assert d["inputs"]["train_success"] == pytest.approx(0.6)  # mean of the last 5: .2 .4 .6 .8 1
    assert d["inputs"]["entropy_ref"] == pytest.approx(1.9)  # step 1
    assert d["inputs"]["token_entropy"] == pytest.approx(1.3)  # step 7
    assert d["inputs"]["eval_success"] == 0.1
    assert d["label"] == "overfitting"  # 1.3 < 0.8 x 1.9; gap 0.6 - 0.1 >= 0.2


def test_metrics_only_degrades_gracefully(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    _write_metrics(run, BASE_METRICS)
    (run / "summary.json").write_text(json.dumps({"eval_before": 0.3, "eval_after": 0.55,
                                                  "steps": 3, "seed": 0, "wall_s": 1.0}))
    assert main([str(run), "--out", str(tmp_path / "elsewhere")]) == 0
    assert not (run / "analysis").exists()
    out = json.loads((tmp_path / "elsewhere" / "analysis.json").read_text())
    assert out["steps"] == [] and out["summary"]["eval_after"] == 0.55
    assert out["diagnosis"]["label"] == "healthy"
    assert "template collapse not assessed (missing mi, log_n)" in out["diagnosis"]["evidence"]
    assert {"mi", "conditional_entropy", "snr"} <= set(out["skipped_plots"])
    assert "no readable rollouts" in capsys.readouterr().out


def test_online_bound_from_hydra_config_without_rollouts(tmp_path, no_plots):
    run = tmp_path / "run"
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "config.yaml").write_text("seed: 0\nrollout:\n  env_groups: 8\n")
    rows = [dict(r) for r in BASE_METRICS]
    rows[3].update({"collapse/mi": 0.5, "collapse/mi_null": 0.1})
    _write_metrics(run, rows)
    d = run_cli(run)["diagnosis"]
    assert d["inputs"]["log_n"] == pytest.approx(math.log(8))
    assert d["sources"]["log_n"] == "log(rollout.env_groups=8) from .hydra/config.yaml"
    assert d["label"] == "healthy"  # excess 0.4 >= 0.1 x log 8 = 0.208


def test_rollouts_only_and_corrupt_gz_are_reported(tmp_path, no_plots, capsys):
    run = make_run(tmp_path, "informative", metrics=None)
    (run / "rollouts" / "step_000002.jsonl.gz").write_bytes(b"\x1f\x8b\x08garbage")
    out = run_cli(run)
    assert out["rollout_steps"] == [1, 3]
    assert any("skipping" in n and "step_000002" in n for n in out["notes"])
    assert "no metrics.jsonl" in capsys.readouterr().out


# ---------------------------------------------------------------------------------- CLI: errors
def _exit_code(argv, capsys) -> tuple[int, str]:
    with pytest.raises(SystemExit) as e:
        main(argv)
    err = capsys.readouterr().err
    return e.value.code, err


def test_missing_run_dir_exits_2(tmp_path, capsys):
    code, err = _exit_code([str(tmp_path / "nope")], capsys)
    assert code == 2
    assert err.strip() == f"ragen2-analyze: error: run directory {tmp_path / 'nope'} does not exist"


def test_empty_dir_exits_2(tmp_path, capsys):
    code, err = _exit_code([str(tmp_path)], capsys)
    assert code == 2 and "is not a run directory" in err and "Traceback" not in err


def test_corrupt_metrics_exits_2_naming_line(tmp_path, capsys):
    run = make_run(tmp_path)
    with open(run / "metrics.jsonl", "a") as f:
        f.write('{oops\n{"step": 9}\n')
    code, err = _exit_code([str(run)], capsys)
    assert code == 2 and "metrics.jsonl:5: not valid JSON" in err
    assert len(err.strip().splitlines()) == 1


def test_out_of_range_metric_exits_2(tmp_path, capsys):
    rows = [dict(r) for r in BASE_METRICS]
    rows[3]["eval/success"] = 1.5
    code, err = _exit_code([str(make_run(tmp_path, "template", rows))], capsys)
    assert code == 2 and "eval_success must be in [0, 1]" in err and "eval/success at step 3" in err


@pytest.mark.parametrize("bad", [["--threshold", "0"], ["--ngram", "0"], ["--permutations", "x"]])
def test_bad_options_exit_2(tmp_path, capsys, bad):
    code, err = _exit_code([str(make_run(tmp_path)), *bad], capsys)
    assert code == 2 and "ragen2-analyze: error: argument" in err


def test_the_offline_diagnosis_reads_the_later_turn_grounding_too(tmp_path, no_plots):
    """The informative run (healthy MI) whose later-turn panel grounding went 0.95 (step 0) ->
    0.5 at step 3 with 0.9 checkable: fell 0.45 >= 0.2, template collapse by the env's check; the
    reference is the first value, the current one the newest."""
    rows = [dict(r) for r in BASE_METRICS]
    for r, g in zip(rows, (0.95, 0.9, 0.7, 0.5)):
        r.update({"collapse/panel/turns/grounding/frac": g,
                  "collapse/panel/turns/grounding/checkable_frac": 0.9})
    d = run_cli(make_run(tmp_path / "a", "informative", rows))["diagnosis"]
    assert d["label"] == "template_collapse" and "by the env's check" in d["evidence"]
    assert d["inputs"]["grounding"] == 0.5 and d["inputs"]["grounding_ref"] == 0.95
    assert d["inputs"]["checkable"] == 0.9
    assert d["sources"]["grounding_ref"] == "collapse/panel/turns/grounding/frac at step 0"
    rows[3]["collapse/panel/turns/grounding/frac"] = 0.8  # fell 0.15: healthy
    d = run_cli(make_run(tmp_path / "b", "informative", rows))["diagnosis"]
    assert d["label"] == "healthy" and "fell 0.15 < 0.2" in d["evidence"]
