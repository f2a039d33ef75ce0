"""ragen2/controller/weights.py: the version the engines hold, the push with its checks, and the
re-sync of a restarted worker, over stand-in learners, workers and sync."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pytest

from ragen2.config import Config
from ragen2.controller.weights import Weights
from ragen2.rollout.pool import WorkerRestartError
from ragen2.sync import probe_ids

NAMES = ["model.embed_tokens.weight", "model.layers.0.input_layernorm.weight",
         "model.layers.0.mlp.down_proj.weight", "model.layers.1.input_layernorm.weight",
         "model.layers.1.self_attn.o_proj.weight", "model.layers.1.mlp.down_proj.weight",
         "model.norm.weight"]


class _Sync:
    def __init__(self, events: list) -> None:
        self.events = events

    def push(self, version, only=None):  # noqa: ANN001
        self.events.append(("push", version, only))
        return {"sync/buckets": 2.0}

    def replace_worker(self, index, worker):  # noqa: ANN001
        self.events.append(("replace", index, worker))


def _weights(*, probe: bool = False, checksum: bool = False, sleep: bool = False):
    cfg = Config()
    cfg = replace(cfg, sync=replace(cfg.sync, probe=probe, checksum=checksum),
                  engine=replace(cfg.engine, sleep_mode=sleep))
    events: list = []
    learners = SimpleNamespace(export_names=lambda: NAMES,
                               release_cuda_cache=lambda: events.append("release"))
    pool = SimpleNamespace(call_all=lambda method, *a: events.append((method, *a)))
    actors = SimpleNamespace(learners=learners, workers=["w0", "w1"], pool=pool)
    w = Weights(cfg, actors, vocab_size=50)
    w.sync = _Sync(events)
    return w, events


def test_what_it_checks_after_a_push():
    w, _ = _weights(probe=True, checksum=True)
    assert w.version == 0 and not w.synced and not w.behind
    # the final norm, the first two and last two block norms, the last o_proj and down_proj
    assert w.checksum_names == ["model.norm.weight", "model.layers.0.input_layernorm.weight",
                                "model.layers.1.input_layernorm.weight",
                                "model.layers.1.self_attn.o_proj.weight",
                                "model.layers.1.mlp.down_proj.weight"]
    assert w.probe == probe_ids(50, Config().sync.probe_tokens)
    off, _ = _weights()
    assert off.checksum_names == [] and off.probe is None and off.verify(["w0"]) == {}


def test_a_push_wakes_sleeping_engines_around_it():
    w, events = _weights(sleep=True)
    m = w.push()
    assert events == ["release", ("wake_up", ["weights"]), ("push", 0, None),
                      ("wake_up", ["kv_cache"])]
    assert m["sync/buckets"] == 2.0 and "timing/sync_s" in m and w.synced


def test_the_version_counts_updates_and_a_worker_restarted_behind_cannot_be_rebuilt():
    w, events = _weights()
    w.resync(1, "w1'")  # nothing pushed yet: the new worker holds model_path's weights already
    assert events == [("replace", 1, "w1'")]
    w.push()
    with w.updating():
        assert w.behind and w.version == 0
        with pytest.raises(WorkerRestartError, match="policy version 0, which the learner no "
                                                     "longer holds"):
            w.resync(0, "w0'")
    assert w.version == 1 and not w.behind
    w.resync(0, "w0''")  # between steps: the current policy is pushed to it alone
    assert events[-2:] == [("replace", 0, "w0''"), ("push", 1, [0])]


def test_the_probe_floor_is_its_checkpoint_state():
    w, _ = _weights(probe=True)
    assert w.state_dict() == {"probe_floor": None}
    w.load_state_dict({"probe_floor": 0.03})
    assert w.probe_policy.floor == 0.03 and w.state_dict() == {"probe_floor": 0.03}
    w.load_state_dict({})  # an older checkpoint: measured again at the first push
    assert w.probe_policy.floor is None
