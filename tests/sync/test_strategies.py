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
    """A learner rank stand-in: exports ``weights`` like ``LearnerRank.named_weights`` and meets
    the other stand-ins at ``barrier`` (a ``threading.Barrier``: the ranks run in threads);
    ``calls`` records the order of gathers and barriers."""

    def __init__(self, rank: int, weights: dict[str, torch.Tensor],
                 barrier: threading.Barrier | None = None) -> None:
        self.rank, self.weights, self._barrier = rank, weights, barrier
        self.exported = 0
        self.calls: list[str] = []

    def named_weights(self, device: str = "cpu", dtype: str | None = None, names=None):
        for name, t in self.weights.items():
            if names is not None and name not in names:
                continue
            self.exported += 1
            self.calls.append(f"gather {name}")
            yield name, t.to(device, getattr(torch, dtype) if dtype else t.dtype)

    def barrier(self) -> None:
        self.calls.append("barrier")
        if self._barrier is not None:
            self._barrier.wait(60)


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
    meet = threading.Barrier(2)
    ranks = [_Rank(0, new, meet), _Rank(1, new, meet)]
    worker = SimpleNamespace(engine=fresh_engine)
    bucket = 64 * 1024
    layout = weight_layout(ranks[0], bucket, "cpu", "float32")
    assert weight_layout(ranks[1], bucket, "cpu", "float32") is None
    assert len(layout) > 3 and sum(len(b) for b in layout) == len(new)

    from ragen2.cluster.rendezvous import open_store

    port = open_store(ranks[0])  # learner rank 0's store, on a port the OS assigned
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


def test_each_bucket_is_gathered_then_every_rank_meets_before_the_broadcast(monkeypatch):
    """Learner side of the nccl strategy: per bucket, every rank gathers its tensors (FSDP
    all-gathers; the bucketing looks one tensor ahead to close a bucket), all ranks meet at a
    barrier (which waits for those gathers to complete), and only then rank 0 broadcasts; rank 1
    never broadcasts. So no all-gather is in flight beside a broadcast."""
    import ragen2.sync.nccl as nccl

    weights = {f"w{i}": torch.full((4,), float(i)) for i in range(5)}  # 16 B each
    ranks = [_Rank(0, weights), _Rank(1, weights)]
    sent: list[torch.Tensor] = []

    def broadcast(holder, flat, what):
        holder.calls.append("broadcast")
        sent.append(flat.clone())

    monkeypatch.setattr(nccl, "_broadcast", broadcast)
    assert [nccl.send_weights(r, 32, "cpu", "float32") for r in ranks] == [3, 3]
    assert ranks[0].calls == ["gather w0", "gather w1", "gather w2", "barrier", "broadcast",
                              "gather w3", "gather w4", "barrier", "broadcast",
                              "barrier", "broadcast"]
    assert ranks[1].calls == [c for c in ranks[0].calls if c != "broadcast"]
    assert [t.tolist() for t in sent] == [[0.0] * 4 + [1.0] * 4, [2.0] * 4 + [3.0] * 4, [4.0] * 4]


def test_a_stuck_weight_group_times_out_naming_the_strategy_and_the_ranks():
    """An engine waits for a broadcast the learner never sends (a member died, or NCCL settings
    disagree): after sync.timeout_s it fails with an error naming the strategy, the backend,
    its rank in the group and who is who, instead of hanging for NCCL's 10 minutes."""
    from ragen2.cluster.rendezvous import open_store
    from ragen2.sync import WeightSyncError
    from ragen2.sync.nccl import join_group, receive_stream

    learner, engine = SimpleNamespace(), SimpleNamespace()
    port = open_store(learner)
    roles = "rank 0 = learner rank 0, rank 1 = rollout worker 0"
    joins = [threading.Thread(target=join_group, args=(h, "127.0.0.1", port, 2, r, "gloo", 2.0,
                                                       roles))
             for r, h in enumerate([learner, engine])]
    [t.start() for t in joins]
    [t.join(60) for t in joins]
    layout = [[("w", (4,), 4)]]
    with pytest.raises(WeightSyncError) as e:
        list(receive_stream(engine, layout, "cpu", "float32"))
    msg = str(e.value)
    assert "strategy nccl, backend gloo" in msg and "receiving bucket 0 of 1" in msg
    assert "sync.timeout_s=2 s on group rank 1 of 2" in msg and roles in msg


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
