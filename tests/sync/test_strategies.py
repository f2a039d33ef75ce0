"""Weight-sync strategies: bucketing, strategy choice, and both transports end to end on CPU.

The learner and worker halves run against stand-ins (a rank that exports a state dict, a worker
holding a real HF engine), so the transports are tested without starting learner actors.
"""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest
import torch

from ragen2.sync import iter_buckets, resolve_strategy


class _Rank:
    """A learner rank stand-in: exports ``weights`` like ``LearnerRank.named_weights``."""

    def __init__(self, rank: int, weights: dict[str, torch.Tensor]) -> None:
        self.rank, self.weights = rank, weights
        self.exported = 0

    def named_weights(self, device: str = "cpu", dtype: str | None = None):
        for name, t in self.weights.items():
            self.exported += 1
            yield name, t.to(device, getattr(torch, dtype) if dtype else t.dtype)


def _sizes(buckets):
    return [[t.numel() for _, t in b] for b in buckets]


def test_buckets_keep_order_respect_the_budget_and_let_big_tensors_travel_alone():
    pairs = [(f"w{i}", torch.zeros(n)) for i, n in enumerate([3, 3, 10, 1, 1, 1])]  # fp32: 4 B each
    buckets = list(iter_buckets(pairs, bucket_bytes=6 * 4))
    assert _sizes(buckets) == [[3, 3], [10], [1, 1, 1]]
    assert [n for b in buckets for n, _ in b] == [f"w{i}" for i in range(6)]
    assert _sizes(iter_buckets(pairs, bucket_bytes=1)) == [[3], [3], [10], [1], [1], [1]]
    assert _sizes(iter_buckets(pairs, bucket_bytes=10**9)) == [[3, 3, 10, 1, 1, 1]]
    assert list(iter_buckets([], 8)) == []
    with pytest.raises(ValueError, match="bucket_bytes"):
        list(iter_buckets(pairs, 0))


@pytest.mark.parametrize("device,layout,strategy,expected", [
    ("cpu", "colocated", "auto", "object_store"),
    ("cuda", "colocated", "auto", "cuda_ipc"),
    ("cuda", "split", "auto", "nccl"),
    ("cuda", "split", "object_store", "object_store"),
])
def test_auto_strategy_follows_the_layout(device, layout, strategy, expected):
    cfg = SimpleNamespace(sync=SimpleNamespace(strategy=strategy),
                          cluster=SimpleNamespace(device=device, layout=layout))
    assert resolve_strategy(cfg) == expected


def _changed(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(7)
    return {k: v + 0.01 * torch.randn(v.shape, generator=gen) for k, v in state.items()}


@pytest.fixture()
def fresh_engine(tiny_model_path):
    from ragen2.engines.hf import HFEngine

    return HFEngine(tiny_model_path)


def _exported(engine) -> dict[str, torch.Tensor]:
    """What a learner would export: the state dict without the tied duplicate."""
    return {k: v.clone() for k, v in engine.model.state_dict().items() if k not in engine._tied}


def _assert_loaded(engine, weights):
    sd = engine.model.state_dict()
    for k, v in weights.items():
        assert torch.equal(sd[k], v), k


def test_collective_broadcast_moves_every_bucket_into_the_engine(fresh_engine):
    """The nccl strategy's code on gloo: learner rank 0 broadcasts, a worker receives and loads;
    learner rank 1 only takes part in the (here trivial) gathers."""
    from ragen2.sync.nccl import join_group, join_worker, receive_weights, send_weights, weight_layout

    new = _changed(_exported(fresh_engine))
    ranks = [_Rank(0, new), _Rank(1, new)]
    worker = SimpleNamespace(engine=fresh_engine)
    bucket = 64 * 1024
    layout = weight_layout(ranks[0], bucket, "cpu", "float32")
    assert weight_layout(ranks[1], bucket, "cpu", "float32") is None
    assert len(layout) > 3 and sum(len(b) for b in layout) == len(new)

    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    errors: list[BaseException] = []

    def run(fn, *args):
        try:
            fn(*args)
        except BaseException as e:  # noqa: BLE001  (re-raised below)
            errors.append(e)

    joins = [threading.Thread(target=run, args=(join_group, ranks[0], "127.0.0.1", port, 2, 0, "gloo")),
             threading.Thread(target=run, args=(join_worker, worker, "127.0.0.1", port, 2, 1, "gloo"))]
    [t.start() for t in joins]
    [t.join(60) for t in joins]
    assert not errors, errors
    sent: list[int] = []
    threads = [threading.Thread(target=lambda r: sent.append(send_weights(r, bucket, "cpu", "float32")),
                                args=(r,)) for r in ranks]
    threads.append(threading.Thread(target=run, args=(receive_weights, worker, layout, 3, "cpu", "float32")))
    [t.start() for t in threads]
    [t.join(120) for t in threads]
    assert not errors, errors
    assert sent == [len(layout)] * 2
    _assert_loaded(fresh_engine, new)
    assert fresh_engine.policy_version == 3


def test_object_store_buckets_stream_into_the_engine(ray_session, fresh_engine):
    from ragen2.sync.object_store import load_buckets, put_buckets

    new = _changed(_exported(fresh_engine))
    refs = put_buckets(_Rank(0, new), 64 * 1024)
    assert put_buckets(_Rank(1, new), 64 * 1024) is None
    assert len(refs) > 3
    load_buckets(SimpleNamespace(engine=fresh_engine), refs, 5)
    _assert_loaded(fresh_engine, new)
    assert fresh_engine.policy_version == 5


def test_hf_engine_refuses_an_incomplete_or_misshapen_sync(fresh_engine):
    full = _exported(fresh_engine)
    partial = dict(list(full.items())[:-1])
    with pytest.raises(KeyError, match="missing"):
        fresh_engine.load_weights(partial, version=1)
    name = next(iter(full))
    with pytest.raises(ValueError, match=name):
        fresh_engine.load_weights({**full, name: torch.zeros(3)}, version=1)
    assert fresh_engine.policy_version == 0
