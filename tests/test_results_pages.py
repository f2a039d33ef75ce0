"""The published figures are generated: every generated block of the README and the results pages
(``benchmarks/pages.py``) matches what its committed data generate, and no result is typed into
``docs/results/*.md`` (or a README table) outside a generated block."""

from __future__ import annotations

import copy
import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import pages  # noqa: E402  (benchmarks/pages.py)
from results_pages import BLOCKS, data, multiturn, real_models, robustness, smollm2  # noqa: E402


def test_every_generated_block_matches_its_data():
    assert pages.stale() == [], "regenerate the pages: python benchmarks/pages.py"


def test_every_page_holds_generated_blocks():
    for page in pages.PAGES:
        assert pages.blocks((ROOT / page).read_text()), page


def test_a_figure_edited_by_hand_is_stale(tmp_path):
    for page in pages.PAGES:
        (tmp_path / page).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / page).write_text((ROOT / page).read_text())
    page = tmp_path / "docs/results/robustness.md"
    text = page.read_text()
    assert "**0.535**" in text
    page.write_text(text.replace("**0.535**", "**0.545**", 1))
    assert pages.stale(tmp_path) == ["docs/results/robustness.md: generated: robustness-table"]


def test_data_changed_without_regenerating_is_stale(monkeypatch):
    doc = copy.deepcopy(data.load(robustness.DOC))
    doc["labels"]["default"]["runs"]["w0_s0"]["after"] = 0.9
    for run in doc["labels"][robustness.CURRENT]["runs"].values():  # moves every median
        run["after"] = 0.9
    real = data.load

    def load(path: str):
        return doc if path == robustness.DOC else real(path)

    monkeypatch.setattr(robustness, "load", load)
    stale = pages.stale()
    assert "docs/results/robustness.md: generated: robustness-table" in stale
    assert "README.md: generated: readme-commands" in stale
    assert "docs/getting-started.md: generated: getting-started-train" in stale


def test_getting_started_states_the_current_labels_medians(monkeypatch):
    before, after = [0.0, 0.0, 0.1, 0.1, 0.2, 0.2], [0.5, 0.52, 0.6, 0.64, 0.7, 0.75]
    walls = [600.0, 700.0, 760.0, 800.0, 850.0, 900.0]
    keys = [f"w{w}_s{s}" for w in range(3) for s in range(2)]
    runs = {k: {"returncode": 0, "before": b, "after": a, "gain": a - b, "wall_s": t}
            for k, b, a, t in zip(keys, before, after, walls)}
    doc = {"labels": {robustness.CURRENT: {"overrides": [], "runs": runs}}}
    monkeypatch.setattr(robustness, "load", lambda path: doc)
    # medians: wall (760 + 800) / 2 = 780 s = 13 min; before 0.10; after (0.6 + 0.64) / 2 = 0.62
    assert BLOCKS["getting-started-train"]() == (
        "On a 2-core CPU `make train` takes about 13 minutes on empty caches and raises held-out "
        "success from about 0.10 to about 0.62 (medians of 6 seed pairs: "
        "[The robustness distribution](results/robustness.md)).")


@pytest.mark.parametrize("page", pages.NO_LOOSE_NUMBERS)
def test_no_result_is_typed_outside_a_generated_block(page):
    loose = pages.loose_numbers((ROOT / page).read_text())
    assert loose == [], (f"{page}: numbers outside generated blocks (generate them in "
                         "benchmarks/results_pages/; a name or a setting: see pages.ALLOWED)")


def test_no_readme_table_holds_a_typed_result():
    text = (ROOT / "README.md").read_text()
    outside = re.sub(r"^```.*?^```", "", pages.BLOCK.sub("", text), flags=re.S | re.M)
    rows = "\n".join(line for line in outside.splitlines() if line.startswith("|"))
    # the tiers' table: the tier's number and its budget are settings (.ci/run's budgets)
    budgets = [(r"^\| [12] \|", "a tier"),
               (r"\d+ min(?: of pytest| with the venv build)?", "a budget")]
    assert pages.loose_numbers(rows, pages.ALLOWED + tuple(
        (re.compile(p, re.M), w) for p, w in budgets)) == []


def test_the_scan_finds_a_typed_number_and_lets_names_and_settings_be():
    text = ("Held-out 0.398 -> 0.789 at commit 163f985 (2026-12-03, issue 28, Study 2, seed 2, "
            "SmolLM2-135M on a 2-core machine, k = 1, H3a, `lr=1e-5`, [x](a1.md#b-2)).\n"
            "<!-- generated: x -->\nthe 0.5 of a block\n<!-- /generated -->\n"
            "```bash\nrun --steps 40\n```\nthen 3.3x and −0.070\n")
    assert pages.loose_numbers(text) == ["line 1: 0.398", "line 1: 0.789", "line 8: 3.3",
                                         "line 8: −0.070"]


def test_the_pair_table_takes_labels_and_shows_a_missing_one_as_not_run():
    md = BLOCKS["pair-table"]("staleness1_lr2.5e-4", "staleness0", "no_such_label")
    head, _, *rows = md.splitlines()
    assert "`no_such_label`" in head and "k = 1 − k = 0" in head
    assert len(rows) == 7  # six seed pairs and the medians
    assert all(r.split(" | ")[3] == "not run" for r in rows)
    assert rows[0].startswith("| w0_s0 | 0.102 -> 0.477, +0.375")


def test_wrapping_never_starts_a_line_with_markup():
    line = "x " * 48 + "- y " + "`a b` " * 30
    for part in pages.wrap(line).splitlines():
        assert not re.match(r"[-+*] |\d+[.)] |[#>|]", part), part
        assert part.count("`") % 2 == 0, part


def test_a_value_under_min_samples_shows_its_count_not_a_value(tmp_path):
    """No run: a hand-written metrics.jsonl and JSON rows (the overrides parsed are strings)."""
    # a run's metrics: the batch's first turn from 11 samples, the panel from 64
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text(json.dumps({
        "step": 1, "collapse/mi": 0.3, "collapse/retrieval_acc@1": 0.7, "collapse/n_samples": 11,
        "collapse/n_prompts": 4, "collapse/panel/mi": 1.2, "collapse/panel/n_samples": 64,
        "collapse/panel/n_prompts": 16}) + "\n")
    row = data.metrics(str(run))[1]
    assert "collapse/mi" not in row and "collapse/retrieval_acc@1" not in row
    assert row["collapse/n_samples"] == 11 and row["collapse/panel/mi"] == 1.2
    assert data.no_value(row, "collapse/mi", 16) == "— (n = 11 < 16)"
    # a JSON row logged before the counts were: the count its retrieval share implies
    assert data.implied_samples(3 / 11, 16) == 11
    assert data.implied_samples(0.5, 16) is None  # 2, 4, ... 16 all fit
    old = {"collapse/mi": 0.028, "collapse/retrieval_acc@1": 3 / 11, "collapse/token_entropy": 0.4}
    kept = data.under_rule(old, 16, 16)
    assert set(kept) == {"collapse/token_entropy", "collapse/n_samples",
                         "collapse/n_samples_implied"}
    assert data.no_value(kept, "collapse/mi", 16) == "— (n = 11 < 16, implied)"
    assert "collapse/mi" not in data.under_rule({**old, "collapse/retrieval_acc@1": 0.5}, 16, 16)
    assert data.under_rule({**old, "collapse/retrieval_acc@1": 0.5}, 2, 16) == {
        "collapse/token_entropy": 0.4}  # no count implied: withheld whatever the minimum
    assert data.least_samples(["env=x", "monitor.min_samples=8"]) == 8
    assert data.least_samples("ragen2.train env=x") == 16


def test_real_models_withholds_the_small_sample_values():
    cell = BLOCKS["gridworld-table"]().splitlines()[-1].split(" | ")[5]
    assert cell == "— (n = 11 < 16, implied)"
    assert "0.028" not in BLOCKS["gridworld-reading"]()
    text = " ".join(BLOCKS["instruments"]().split())
    assert "`collapse/action/mi` and its bound, p and retrieval show — (n = 11 < 16)" in text
    assert "0.32 (bound" not in text
    assert real_models._instrument_rows()[1] == 16


@pytest.mark.parametrize("trained_on", [0, 5])
def test_the_split_block_says_not_held_out_whenever_a_problem_was_trained_on(
        monkeypatch, trained_on):
    path = smollm2.OVERLAP[smollm2.DOC]
    doc = copy.deepcopy(data.load(path))
    for r in doc["runs"]:
        r["distinct_trained_on"] = trained_on
    monkeypatch.setattr(smollm2, "load", lambda p: doc if p == path else data.load(p))
    monkeypatch.setattr(smollm2, "preset_split", lambda: (55, 162, 0.35, 55))
    text = " ".join(BLOCKS["smollm2-split"]().split())
    assert ("Not held out after all" in text) == (trained_on > 0)
    assert ("Held out, and checked" in text) == (trained_on == 0)
    assert "holds out 55 of the 162 one-digit problems" in text
    assert "evaluates each once (`trainer.eval_episodes=55`)" in text
    row = smollm2.readme_smollm2_row()[2]
    assert ("not held out" in row) == (trained_on > 0)


def test_the_split_block_reports_every_kind_per_seed():
    text = BLOCKS["smollm2-split"]()
    seeds = [r["seed"] for r in smollm2.runs()]
    assert all(f"seed {s}: n, success" in text for s in seeds)
    for name in ("all", "`a + b`", "`a − b ≥ 0`", "`a − b < 0`"):
        assert f"| {name} |" in text, name
    # every kind's n adds up to the run's held-out problems (55 in the committed runs)
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    for col in range(1, len(seeds) + 1):
        assert sum(int(row.split(" | ")[col].split("n = ")[1].split(":")[0]) for row in rows) == 55


def test_the_earlier_block_reports_every_part_and_kind():
    text = BLOCKS["smollm2-earlier"]()
    assert "**They were not held out.**" in " ".join(text.split())
    for name in ("problem never trained on", "problem trained on", "`a + b`, never trained on",
                 "`a − b ≥ 0`, all", "`a − b < 0`, never trained on"):
        assert f"| {name} |" in text, name
    assert "+0.208 [-0.042, +0.458] over 24 episodes (seed 1)" in text
    assert "+0.459 [+0.297, +0.622] over 37 episodes (seed 2)" in text


def test_the_multiturn_block_names_the_candidates_inside_the_window(monkeypatch):
    text = " ".join(BLOCKS["smollm2-multiturn-tasks"]().split())
    inside = text.split("window (held-out success, the point estimate): ")[1].split(". ")[0]
    assert inside == ("`math1_retry` (0.508), `math1_direction` (0.500) and "
                      "`countdown2_retry` (0.141)")
    assert "0 of 18 of their successes came after the first turn" in text
    doc = copy.deepcopy(data.load(multiturn.DOC))
    doc["results"][multiturn.PROTOCOL]["math2_retry"]["success"] = 0.2  # now inside
    doc["results"][multiturn.PROTOCOL]["countdown2_retry"]["success"] = 0.61  # now above
    monkeypatch.setattr(multiturn, "load", lambda path: doc)
    text = " ".join(BLOCKS["smollm2-multiturn-tasks"]().split())
    inside = text.split("window (held-out success, the point estimate): ")[1].split(". ")[0]
    assert "`math2_retry` (0.200)" in inside and "countdown2_retry" not in inside
    assert "10 + 6 = 16" in BLOCKS["smollm2-multiturn-example"]("countdown2_retry")


def test_a_settings_ab_names_both_sides_settings(tmp_path):
    """``update_ab.py --b-set`` (one checkout, two settings) renders as A / B with each side's
    overrides, not as a commit before / after; the ratio is the file's."""
    from results_pages import account

    doc = {"settings": {"run_dir": "x/runs/d0_s3", "rounds": 2, "repeats": 3},
           "results": {"A": {"commit": "abc1234", "overrides": [], "update_s": [8.0, 7.5],
                             "median_s": 7.75},
                       "B": {"commit": "abc1234", "overrides": ["learner.attn_implementation=eager"],
                             "update_s": [20.0, 19.0], "median_s": 19.5},
                       "per_round_ratio": [2.5, 2.53]},
           "ratios": {"b_over_a": 19.5 / 7.75}}
    path = tmp_path / "ab.json"
    path.write_text(json.dumps(doc))
    text = account.update_ab(str(path))
    assert "run `d0_s3`'s median batch at abc1234" in text
    assert "A (the run's settings) and B (`learner.attn_implementation=eager`)" in text
    assert "B / A: 2.516 (per round 2.50, 2.53)" in text
    assert "before" not in text


def test_a_commit_ab_names_the_batch_it_timed(tmp_path):
    """A commit before / after A/B names its batch: the account's (a run under
    ``outputs/step_account/``) or another run's median batch by the run's name.

    No run: the A/B's JSON is written by hand; a collapse-study run folder is only named."""
    from results_pages import account

    doc = {"settings": {"run_dir": "outputs/step_account/2026-12-05_04-16-43", "rounds": 1,
                        "repeats": 3},
           "results": {"A": {"commit": "aaa1111", "update_s": [10.0], "median_s": 10.0},
                       "B": {"commit": "bbb2222", "update_s": [8.0], "median_s": 8.0},
                       "per_round_ratio": [0.8]},
           "ratios": {"b_over_a": 0.8}}
    path = tmp_path / "ab.json"
    path.write_text(json.dumps(doc))
    assert account.update_ab(str(path)).startswith(
        "One update of the account's batch, 1 rounds alternating the commit before (aaa1111) "
        "and after (bbb2222)")
    doc["settings"]["run_dir"] = "benchmarks/collapse_study/results_v3/runs/d0_s3"
    path = tmp_path / "ab_run.json"
    path.write_text(json.dumps(doc))
    text = account.update_ab(str(path))
    assert text.startswith("One update of run `d0_s3`'s median batch, 1 rounds alternating")
    assert "After / before: 0.800 (per round 0.80)." in text


def test_the_smollm2_trl_block_reads_both_sides(tmp_path, monkeypatch):
    """The SmolLM2 TRL comparison's block, from a hand-written result: each side's median step,
    its steps' sum, its paired gain over the base model and its first and last 5 steps' mean
    reward; the ratio and the paired difference of the two final policies."""
    from results_pages import trl_smollm2

    monkeypatch.setattr(trl_smollm2, "ROOT", tmp_path)
    assert trl_smollm2.smollm2_trl().startswith("Not run yet")

    def side(step_s, rewards, cores):
        return {"step_s": step_s, "curve": [{"rollout/reward_mean": r} for r in rewards],
                "process": {"foreign_cores": cores}}

    def gain(before, after, g, lo, hi, better, worse):
        return {"problems": 55, "before": before, "after": after, "gain": g, "gain_lo": lo,
                "gain_hi": hi, "improved": better, "worsened": worse}

    doc = {"settings": {"settings": {"steps": 10, "problems": 8, "group_size": 8,
                                     "max_new_tokens": 128, "dtype": "bfloat16", "seed": 1},
                        "commit": "abcdef123"},
           "machine": {"cpu": "AMD EPYC", "cpus": 2, "trl": "1.16.0"},
           "results": {"ragen2": side([40.0] + [30.0] * 9, [0.0] * 5 + [0.5] * 5, 0.01),
                       "trl": side([100.0] * 10, [0.1] * 5 + [0.3] * 5, 0.02),
                       "step_s_median": {"ragen2": 30.0, "trl": 100.0},
                       "held_out": {"gain": {"ragen2": gain(0.4, 0.8, 0.4, 0.25, 0.55, 24, 2),
                                             "trl": gain(0.4, 0.6, 0.2, 0.05, 0.35, 14, 3)},
                                    "trl_minus_ragen2": gain(0.8, 0.6, -0.2, -0.35, -0.05, 3, 14)}},
           "ratios": {"trl_over_ragen2": 100.0 / 30.0}}
    (tmp_path / "benchmarks" / "results").mkdir(parents=True)
    (tmp_path / trl_smollm2.DOC).write_text(json.dumps(doc))
    monkeypatch.setattr(trl_smollm2, "load", lambda path: doc)
    text = trl_smollm2.smollm2_trl()
    assert ("| ragen2 | 30.0 s | 310 s | 0.400 -> 0.800 | **+0.400 [+0.250, +0.550]** | 24 / 2 | "
            "0.000 -> 0.500 | 0.01 |") in text
    assert ("| TRL | 100.0 s | 1,000 s | 0.400 -> 0.600 | **+0.200 [+0.050, +0.350]** | 14 / 3 | "
            "0.100 -> 0.300 | 0.02 |") in text
    assert "TRL / ragen2 step time: **3.33**" in text
    assert ("minus ragen2's on the same held-out problems: -0.200 [-0.350, -0.050] (better on 3, "
            "worse on 14 of the 55 problems)") in " ".join(text.split())
    assert "same 55 held-out problems" in text and "commit `abcdef1`" in text


def _six(gains: list[float]) -> dict:
    keys = [f"w{w}_s{s}" for w in range(3) for s in range(2)]
    return {"overrides": [], "runs": {k: {"returncode": 0, "before": 0.0, "after": g, "gain": g,
                                           "wall_s": 600.0} for k, g in zip(keys, gains)}}


def test_the_near_verdict_says_which_side_of_the_margin_a_median_lies(monkeypatch):
    doc = {"labels": {"new": _six([0.30, 0.32, 0.34, 0.36, 0.38, 0.40]),
                      "low": _six([0.20, 0.22, 0.26, 0.28, 0.30, 0.32]),
                      "near": _six([0.31, 0.33, 0.36, 0.38, 0.39, 0.41])}}
    monkeypatch.setattr(robustness, "load", lambda path: doc)
    lines = BLOCKS["near-verdict"]("new", "low", "near").splitlines()
    # medians: new (0.34 + 0.36) / 2 = 0.35, low (0.26 + 0.28) / 2 = 0.27 (+0.08: outside 0.05,
    # higher), near (0.36 + 0.38) / 2 = 0.37 (-0.02: within)
    assert "medians +0.350 and +0.270, +0.080 (outside 0.05, higher;" in lines[2]
    assert lines[2].endswith("**the bar fails**. On all six pairs the medians differ by +0.080.")
    assert "medians +0.350 and +0.370, −0.020 (within 0.05; median pair" in lines[3]
    assert "**the bar holds**" in lines[3]


def test_the_served_env_job_block_reads_its_runs(tmp_path):
    """remote-env-job: each run's row, and the ratios of the medians against the goal, hand-computed:
    walls local 1000, 1020 (median 1010) and remote 1100, 1122 (1111): 1.100, 1.100 a round;
    steps local 10.0, 10.4 (10.2) and remote 11.0, 11.2 (11.1): 1.088, +0.900 s a step."""
    import remote_env  # benchmarks/remote_env.py
    from results_pages import remote_env as page

    def run(arm, rnd, wall, step, env_s, per):
        return {"arm": arm, "round": rnd, "returncode": 0, "wall_s": wall, "foreign_cores": 0.01,
                "requests_per_step_request": per, "before": 0.1, "after": 0.4, "gain": 0.3,
                "server_cpu_s": 12.5 if arm == "remote" else 0.0,
                "steps": {"step_s": step, "env_s": env_s, "generate_s": 4.0,
                          "warm_start_s": 120.0}}

    runs = [run("local", 0, 1000.0, 10.0, 0.02, None), run("remote", 0, 1100.0, 11.0, 0.5, 1.0),
            run("remote", 1, 1122.0, 11.2, 0.6, 1.0), run("local", 1, 1020.0, 10.4, 0.03, None)]
    doc = {"job": {"machine": {"cpu": "AMD EPYC", "cpus": 2}, "commit": "abc1234",
                   "settings": {"overrides": ["trainer.warm_start.cache=false"], "rounds": 2,
                                "order": remote_env.arm_order(2)},
                   "goal": remote_env.GOAL, "runs": runs, "summary": remote_env.summarize(runs)}}
    path = tmp_path / "remote_env.json"
    path.write_text(json.dumps(doc))
    text = BLOCKS["remote-env-job"](str(path))
    assert ("| 1 | remote | exit 0 | 1,100.00 s | 11.00 s | 0.500 s | 4.00 s | 120.00 s | 1.00 | "
            "12.50 s | 0.100 -> 0.400 | 0.01 |") in text
    assert "| 1 | local | exit 0 | 1,000.00 s | 10.00 s | 0.020 s | 4.00 s | 120.00 s | — | — |" in text
    prose = " ".join(text.split())
    assert "in the order local remote remote local" in prose
    assert ("remote / local of the median wall times **1.100** (per round 1.100, 1.100; the goal "
            "<= 1.15: met); of the median RL step 1.088 (+0.900 s a step)") in prose
    runs[1]["wall_s"] = runs[2]["wall_s"] = 1200.0  # 1200 / 1010 = 1.188
    doc["job"]["summary"] = remote_env.summarize(runs)
    page.load.cache_clear()
    path.write_text(json.dumps(doc))
    assert "**1.188** (per round 1.200, 1.176; the goal <= 1.15: not met)" in " ".join(
        BLOCKS["remote-env-job"](str(path)).split())
    # before the timing: the page says so instead of failing
    assert BLOCKS["remote-env-job"](str(tmp_path / "none.json")).startswith("**Not measured yet**")
    assert BLOCKS["remote-env-latency"](str(path)).startswith("**Not measured yet**")


def test_the_served_env_latency_block_reads_its_arms(tmp_path):
    """remote-env-latency: microseconds per reset and turn per arm, the turn's ratio to
    in-process (460 / 13.4 = 34.3)."""
    doc = {"latency": {"machine": {"cpu": "AMD EPYC", "cpus": 2}, "settings": {"turns": 2000},
                       "results": {"local": {"reset_us": 50.8, "turn_us": 13.4},
                                   "remote_ground_with_step": {"reset_us": 632.0,
                                                               "turn_us": 460.0}},
                       "ratios": {"remote_ground_with_step": 460.0 / 13.4}}}
    path = tmp_path / "remote_env.json"
    path.write_text(json.dumps(doc))
    text = BLOCKS["remote-env-latency"](str(path))
    assert "| in-process | 51 µs | 13 µs | 1 |" in text
    assert "| HTTP, verdict with the step (one request a turn) | 632 µs | 460 µs | 34.3 |" in text
    assert "2,000 turns an arm on AMD EPYC" in text
