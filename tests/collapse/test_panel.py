"""The probe panel's pieces: bootstrap intervals over prompts, the panel choice, its metrics, the
collapse alert rule, the rollback's stronger filter and the protected rollback target."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from ragen2 import seeding
from ragen2.collapse.alert import CollapseAlert
from ragen2.collapse.mi import bootstrap_intervals, mutual_information, resample_statistics
from ragen2.collapse.panel import PanelPrompt, ProbePanel, choose_panel, panel_metrics
from ragen2.config import FilterConfig
from ragen2.filtering.pipeline import FilterPipeline
from ragen2.learner import checkpoint


def _matrix(n_prompts: int, per: int, dependence: float, seed: int = 0):
    """(S, N) scores: every sample scores `dependence` higher under its own prompt, plus noise."""
    g = torch.Generator().manual_seed(seed)
    owner = torch.arange(n_prompts).repeat_interleave(per)
    logp = -20.0 + torch.randn((len(owner), n_prompts), generator=g, dtype=torch.float64)
    logp[torch.arange(len(owner)), owner] += dependence
    return logp, owner


def _explicit(logp, owner, counts):
    """One resample built by hand: prompt j's samples repeated c_j times, each still scored
    under all N prompts, through the point estimator."""
    rows = [s for j in range(logp.shape[1]) for _ in range(int(counts[j]))
            for s in torch.nonzero(owner == j).flatten().tolist()]
    return mutual_information(logp[rows], owner[rows])


def test_resample_statistics_match_an_explicitly_resampled_panel():
    logp, owner = _matrix(5, 3, dependence=1.0)
    logp[0, 3] = logp[0, 0]  # a tie with the own prompt: retrieval counts it half
    counts = torch.tensor([[2.0, 0, 1, 1, 1], [0, 0, 5, 0, 0], [1, 1, 1, 1, 1], [0, 3, 0, 2, 0]],
                          dtype=torch.float64)
    got = resample_statistics(logp, owner, counts)
    for b in range(len(counts)):
        ref = _explicit(logp, owner, counts[b])
        assert got["mi"][b].item() == pytest.approx(ref["mi"], abs=1e-12)
        assert got["h_cond"][b].item() == pytest.approx(ref["h_cond"], abs=1e-12)
        assert got["retrieval_acc@1"][b].item() == pytest.approx(ref["retrieval_acc@1"], abs=1e-12)
    # all counts 1: the point estimate (up to summation order)
    assert got["mi"][2].item() == pytest.approx(mutual_information(logp, owner)["mi"], abs=1e-12)


def test_bootstrap_intervals_bracket_the_estimate_and_vanish_for_an_input_blind_policy():
    logp, owner = _matrix(16, 4, dependence=3.0)
    point = mutual_information(logp, owner)
    ci = bootstrap_intervals(logp, owner, num_resamples=300, generator=torch.Generator().manual_seed(1))
    assert ci["mi_lo"] < point["mi"] < ci["mi_hi"] and ci["mi_lo"] > 1.0
    assert ci["h_cond_lo"] < point["h_cond"] < ci["h_cond_hi"]
    assert ci["retrieval_acc@1_lo"] <= point["retrieval_acc@1"] <= ci["retrieval_acc@1_hi"]
    blind = logp[:, :1].expand(-1, 16).clone()  # every prompt scores a sample alike
    ci0 = bootstrap_intervals(blind, owner, num_resamples=50, generator=torch.Generator().manual_seed(1))
    assert ci0["mi_lo"] == pytest.approx(0.0, abs=1e-12) and ci0["mi_hi"] == pytest.approx(0.0, abs=1e-12)
    # same seed, same intervals (resume); another seed, other resamples
    again = bootstrap_intervals(logp, owner, num_resamples=300, generator=torch.Generator().manual_seed(1))
    other = bootstrap_intervals(logp, owner, num_resamples=300, generator=torch.Generator().manual_seed(2))
    assert again == ci and other != ci


@pytest.mark.parametrize("kwargs, match", [({"num_resamples": 1}, "num_resamples"),
                                           ({"level": 1.0}, "level")])
def test_bootstrap_intervals_refuse_bad_settings(kwargs, match):
    logp, owner = _matrix(3, 2, 1.0)
    with pytest.raises(ValueError, match=match):
        bootstrap_intervals(logp, owner, **kwargs)


def test_bootstrap_intervals_refuse_an_infinite_score():
    logp, owner = _matrix(3, 2, 1.0)
    logp[0, 2] = -math.inf
    with pytest.raises(ValueError, match="finite"):
        bootstrap_intervals(logp, owner)


def test_panel_metrics_call_a_reading_policy_healthy_and_a_template_not():
    dep, owner = _matrix(32, 4, dependence=2.0)
    m = panel_metrics(dep.numpy(), owner.numpy(), [str(i) for i in range(32)], 200, 200, seed=3)
    assert m["mi_lo"] > m["mi_floor"] and m["healthy"] == 1.0
    assert m["mi_bound"] == pytest.approx(math.log(32)) and m["n_prompts"] == 32
    assert m["mi_p_value"] == pytest.approx(1 / 201)
    blind, _ = _matrix(32, 4, dependence=0.0)
    m0 = panel_metrics(blind.numpy(), owner.numpy(), [str(i) for i in range(32)], 200, 200, seed=3)
    assert m0["mi_lo"] <= m0["mi_floor"] and m0["healthy"] == 0.0


def test_choose_panel_takes_distinct_observations_per_env_from_the_panel_seeds():
    def observe(env, seed):
        i = seed - seeding.PANEL_SEED_BASE
        return f"{env}:{i % 3}" if env == "few" else f"{env}:{i // 2}"  # "many": pairs repeat

    panel = choose_panel([("many", 4), ("few", 5)], observe)
    many = [p for p in panel if p.env == "many"]
    few = [p for p in panel if p.env == "few"]
    assert [p.seed - seeding.PANEL_SEED_BASE for p in many] == [0, 2, 4, 6]
    assert [p.observation for p in few] == ["few:0", "few:1", "few:2"]  # only 3 exist
    assert len({p.observation for p in panel}) == len(panel)
    # held out: above every training and evaluation seed
    assert min(p.seed for p in panel) >= seeding.EVAL_SEED_BASE + 2**30 > seeding.TRAIN_SEED_LIMIT


def test_choose_panel_skips_seeds_whose_reset_fails(caplog):
    def observe(env, seed):
        if seed % 2:
            raise RuntimeError("broken seed")
        return str(seed)

    panel = choose_panel([("flaky", 3)], observe)
    assert [p.seed - seeding.PANEL_SEED_BASE for p in panel] == [0, 2, 4]
    assert "failed in reset on 2 of 5 seeds" in caplog.text and "broken seed" in caplog.text


def test_panel_specs_sample_every_prompt_as_one_group():
    panel = ProbePanel([PanelPrompt("a", 7, "x"), PanelPrompt("b", 9, "y")], samples=3,
                       bootstrap=10, permutations=10, seed=0)
    specs = panel.specs()
    assert [(s.env_seed, s.group_id, s.env) for s in specs] == [(7, 0, "a")] * 3 + [(9, 1, "b")] * 3
    with pytest.raises(ValueError, match="2 distinct prompts"):
        ProbePanel([PanelPrompt("a", 7, "x")], 3, 10, 10, 0)


# ------------------------------------------------------------------------------- the alert
def test_alert_fires_after_k_measurements_under_the_floor_while_success_stalls():
    a = CollapseAlert(patience=3)
    a.observe_eval(0, 0.30)
    assert a.observe_panel(5, mi_lo=0.01, mi_floor=0.02) is None
    assert a.observe_panel(10, mi_lo=0.50, mi_floor=0.02) is None  # healthy: count restarts
    assert a.observe_panel(15, 0.0, 0.02) is None
    a.observe_eval(20, 0.28)
    assert a.observe_panel(20, 0.0, 0.02) is None
    evidence = a.observe_panel(25, 0.02, 0.02)  # at the floor counts as under it
    assert evidence is not None and "steps 15" not in evidence
    assert "step 15: +0.000 <= +0.020" in evidence and "0.280 (step 20)" in evidence
    assert a.below == []  # counting starts over


def test_alert_holds_while_held_out_success_still_improves():
    a = CollapseAlert(patience=2, min_gain=0.05)
    a.observe_eval(0, 0.30)
    a.observe_panel(5, 0.0, 0.1)
    a.observe_eval(10, 0.40)  # +0.10 > 0.05: progress
    assert a.observe_panel(10, 0.0, 0.1) is None
    a.observe_eval(15, 0.42)  # +0.02 over the best at or before step 10, where the window now starts
    assert a.observe_panel(15, 0.0, 0.1) is not None


def test_alert_without_an_earlier_evaluation_compares_with_the_first_inside():
    a = CollapseAlert(patience=2)
    a.observe_panel(1, 0.0, 0.1)  # (a resumed run's alert state has no evaluation before)
    a.observe_eval(2, 0.10)
    a.observe_eval(5, 0.30)
    assert a.observe_panel(5, 0.0, 0.1) is None  # 0.10 -> 0.30 inside the window

def test_alert_waits_for_a_held_out_evaluation_inside_its_window():
    a = CollapseAlert(patience=2)
    a.observe_eval(0, 0.10)
    assert a.observe_panel(0, 0.0, 0.1) is None
    assert a.observe_panel(5, 0.0, 0.1) is None  # no evaluation after step 0 yet: no evidence
    assert a.observe_panel(10, 0.0, 0.1) is None  # window 5, 10: still none after step 5
    a.observe_eval(15, 0.10)
    evidence = a.observe_panel(15, 0.0, 0.1)  # window 10, 15; 0.10 at 15 vs 0.10 at 0
    assert evidence is not None and "step 10" in evidence and "step 5" not in evidence


def test_a_panel_without_reasoning_counts_as_under_the_floor():
    a = CollapseAlert(patience=2)
    a.observe_eval(0, 0.5)
    assert a.observe_panel(3, None, None) is None
    a.observe_eval(4, 0.2)
    evidence = a.observe_panel(4, 0.0, 0.1)
    assert evidence is not None and "step 3: no value (too few samples)" in evidence


def test_alert_state_round_trips():
    a = CollapseAlert(patience=3)
    a.observe_eval(0, 0.2)
    a.observe_panel(5, 0.0, 0.1)
    a.observe_panel(6, None, None)
    b = CollapseAlert(patience=3)
    b.load_state_dict(json.loads(json.dumps(a.state_dict())))
    assert b.state_dict() == a.state_dict() and b.evals == a.evals


# ---------------------------------------------------------------------- stronger filter
@pytest.mark.parametrize("strategy, value, want", [
    ("top_p", 0.9, ("top_p", 0.675)), ("top_p_softmax", 0.8, ("top_p_softmax", 0.6)),
    ("top_k", 0.5, ("top_k", 0.375)), ("top_k_abs", 4, ("top_k_abs", 3.0)),
    ("top_k_abs", 1, ("top_k_abs", 1.0)), ("min_p", 0.5, ("min_p", 0.625)),
    ("none", 1.0, ("top_p", 0.75))])
def test_strengthen_keeps_less_and_drops_zero_spread_groups(strategy, value, want):
    pipe = FilterPipeline(FilterConfig(strategy=strategy, value=value), seed=0)
    pipe.strengthen(0.75)
    assert (pipe.cfg.strategy, pipe.cfg.value) == (want[0], pytest.approx(want[1]))
    assert pipe.cfg.include_zero is False
    pipe.cfg.validate("filter")  # still a valid filter
    resumed = FilterPipeline(FilterConfig(strategy=strategy, value=value), seed=0)
    resumed.load_state_dict(json.loads(json.dumps(pipe.state_dict())))
    assert resumed.cfg == pipe.cfg


def test_a_stronger_top_p_keeps_fewer_groups():
    from ragen2.rollout.trajectory import Trajectory

    rewards = {0: [0, 1, 1, 1], 1: [0, 0, 1, 1], 2: [0, 0, 0, 1], 3: [1, 1, 1, 1]}
    trajs = []
    for g, rs in rewards.items():
        for r in rs:
            t = Trajectory(env_seed=g, group_id=g, policy_version=0)
            t.turn_rewards = [float(r)]
            trajs.append(t)
    pipe = FilterPipeline(FilterConfig(strategy="top_p", value=1.0), seed=0)
    assert pipe.select(trajs, 1).kept == {0, 1, 2, 3}
    pipe.strengthen(0.5)  # top_p 0.5, zero-spread group 3 dropped
    kept = pipe.select(trajs, 1).kept
    assert kept == {1, 0} or kept == {1, 2}  # σ: 0.433, 0.5, 0.433 -> half the mass: two groups
    assert 3 not in kept


# ---------------------------------------------------------------- protected rollback target
def test_prune_keeps_the_protected_checkpoint(tmp_path):
    for step in (0, 5, 10, 15):
        d = checkpoint.checkpoint_root(tmp_path) / f"step_{step:06d}"
        d.mkdir(parents=True)
        (d / checkpoint.STATE_FILE).write_text(json.dumps({"step": step}))
    target = checkpoint.checkpoint_root(tmp_path) / "step_000005"
    checkpoint.prune(tmp_path, keep=2, protect=[target])
    assert [p.name for p in checkpoint.complete(tmp_path)] == ["step_000005", "step_000010",
                                                               "step_000015"]
    checkpoint.prune(tmp_path, keep=2)
    assert [p.name for p in checkpoint.complete(tmp_path)] == ["step_000010", "step_000015"]


def test_panel_seeds_never_meet_training_or_evaluation_seeds():
    assert seeding.panel_seed(0) == seeding.PANEL_SEED_BASE
    assert seeding.eval_seed(2**30 - 1) < seeding.panel_seed(0)
    assert seeding.panel_sampling_seed(0, 5, 1) != seeding.sampling_seed(0, 5, 1)
    assert np.iinfo(np.int64).max > seeding.panel_seed(10**6)


# ------------------------------------------------------------------ the panel's measurement
def _panel_trajs():
    from tests.collapse.test_monitor import traj

    trajs = []
    for g in range(4):
        for _ in range(2):
            t = traj(g, f"r{g}", f"obs{g}")
            t.turn_ends = [len(t.input_ids) - 1]
            t.responses = [f"<think>r{g}</think><answer>a{g}</answer>"]
            trajs.append(t)
    return trajs


def _scorer(dependent: bool):
    owner = np.repeat(np.arange(4), 2)

    def score(contexts, conts, columns):
        if len(contexts) == 4:  # prompts: a sample scores -1 under its own, -6 elsewhere
            logp = np.where(columns == owner[:, None], -1.0, -1.0 - 5.0 * dependent)
        else:  # actions under (prompt, reasoning) contexts: all alike
            logp = np.full(columns.shape, -2.0)
        return logp, np.full(columns.shape, 2)
    return score


def test_the_panel_measures_mi_with_intervals_and_writes_its_samples(tmp_path):
    from ragen2.collapse.panel import write_records

    prompts = [PanelPrompt("env", seeding.panel_seed(i), f"obs{i}") for i in range(4)]
    panel = ProbePanel(prompts, samples=2, bootstrap=50, permutations=50, seed=0, min_samples=8)
    got = panel.measure(_panel_trajs(), _scorer(True), step=5)
    m = got.metrics
    marginal = math.log(math.exp(-1) + 3 * math.exp(-6)) - math.log(4)
    assert m["collapse/panel/mi"] == pytest.approx(-1 - marginal)  # every sample alike
    assert m["collapse/panel/mi_lo"] == pytest.approx(-1 - marginal)  # so is every resample
    assert m["collapse/panel/healthy"] == 1.0 and m["collapse/panel/n_prompts"] == 4
    assert got.healthy is True and got.mi_lo == m["collapse/panel/mi_lo"]
    assert got.mi_floor == m["collapse/panel/mi_floor"]
    assert m["collapse/panel/action/mi"] == pytest.approx(0.0, abs=1e-12)  # answers ignore z
    assert m["collapse/panel/reasoning_frac"] == 1.0
    blind_measured = panel.measure(_panel_trajs(), _scorer(False), step=5)
    blind = blind_measured.metrics
    assert blind["collapse/panel/mi"] == pytest.approx(0.0, abs=1e-12)
    assert blind["collapse/panel/healthy"] == 0.0 and blind_measured.healthy is False
    path = write_records(tmp_path, 5, panel.records(_panel_trajs(), 5))
    recs = [json.loads(line) for line in path.read_text().splitlines()]
    assert path.name == "step_000005.jsonl" and len(recs) == 4
    assert recs[1] == {"step": 5, "key": seeding.panel_seed(1), "env": "env", "prompt": "obs1",
                       "reasoning": ["r1", "r1"], "answers": ["a1", "a1"]}


def test_a_panel_without_reasoning_reports_no_prompts():
    from tests.collapse.test_monitor import traj

    panel = ProbePanel([PanelPrompt("env", 1, "a"), PanelPrompt("env", 2, "b")], 2, 10, 10, 0)
    got = panel.measure([traj(0, None, "a"), traj(1, None, "b")], _scorer(True), step=1)
    m = got.metrics
    assert m["collapse/panel/n_prompts"] == 0.0 and m["collapse/panel/reasoning_frac"] == 0.0
    assert "collapse/panel/mi_lo" not in m
    assert got.mi_lo is None and got.mi_floor is None and got.healthy is None
