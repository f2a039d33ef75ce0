"""The collapse study's design as its runner builds it (benchmarks/collapse_study/run.py): the
overrides of each arm and seed, the entropy arms' refusal before the coefficient is measured, and
the pre-registered hypotheses naming arms and series that exist. No run: the overrides only."""

from __future__ import annotations

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
        "tiered": ["filter=tiered"]}
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
    arms = set(study.DESIGNS["v2"]["arms"])
    hs = study.hypotheses()
    assert [h.id for h in hs] == ["H1a", "H1b", "H1c", "H2a", "H2b", "H3a", "H3b", "H4a", "H4b"]
    for h in hs:
        for arm in (getattr(h, "arm", None), getattr(h, "baseline", None)):
            assert arm is None or arm in arms
        for name in (getattr(h, k, None) for k in ("metric", "x", "than", "y")):
            assert name is None or name in SERIES
        assert h.direction in ("negative", "positive")
