"""ragen2/learner/rank_state.py: the typed state a learner rank's parts share, and how the
LearnerRank facade holds it."""

from __future__ import annotations

import ast
from pathlib import Path

import torch

from ragen2.cluster.memory import SHARDED_META_INIT
from ragen2.learner.rank import LearnerRank
from tests.learner.toy import toy_state

LEARNER = Path(__file__).resolve().parents[2] / "ragen2" / "learner"
PARTS = ("build", "forward", "ppo", "sft", "probes", "state", "sharded")


def test_a_new_state_starts_at_version_0_without_a_warm_start_optimiser():
    s = toy_state()
    assert s.version == 0 and s.sft_optim is None
    s.version += 1  # what an update does
    assert s.version == 1


def test_the_parts_take_the_state_and_never_import_the_rank():
    for part in PARTS:
        tree = ast.parse((LEARNER / f"{part}.py").read_text())
        imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        assert "ragen2.learner.rank" not in imported, part
        assert "ragen2.learner.rank_state" in imported, part


def test_the_rank_forwards_to_its_state():
    r = LearnerRank.__new__(LearnerRank)  # no process group, no model: the state alone
    r.rank, r.state = 0, toy_state(vocab=3, version=7)
    assert r.get_version() == 7 and r.model is r.state.model and r.device == torch.device("cpu")
    assert r.export_names() == ["bias"]
    assert dict(r.named_weights())["bias"].tolist() == [0.0, 0.0, 0.0]
    r.rank = 1
    assert r.export_names() is None  # rank 0 answers


def test_the_memory_estimate_plans_for_the_learners_meta_init():
    assert LearnerRank.meta_init is SHARDED_META_INIT is True
