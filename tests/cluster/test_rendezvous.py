"""Process groups meet without a pick-then-bind race (ragen2.cluster.rendezvous).

A cold ``make test`` once failed with ``DistNetworkError ... EADDRINUSE``: the port had been
chosen by binding port 0 and closing the socket, and something else took it before the group's
store bound it. Now rank 0's store binds port 0 itself and the ranks use the port it got: these
tests take the port "from outside" between choosing and joining (what the race did) and check
that it cannot be taken and that the group meets on exactly that store.
"""

from __future__ import annotations

import datetime
import errno
import socket
import threading
import time
from types import SimpleNamespace

import pytest

from ragen2.cluster.rendezvous import SpawnRendezvous, join_store, open_store
from tests.ports import _ephemeral, port_clash, spare_port

TIMEOUT = datetime.timedelta(seconds=60)


def _taken(port: int) -> bool:
    """Whether another process's bind of ``port`` (on any address, or loopback) would fail."""
    for host in ("", "127.0.0.1"):
        with socket.socket() as s:
            try:
                s.bind((host, port))
            except OSError as e:
                assert e.errno == errno.EADDRINUSE, e
                continue
            return False
    return True


def test_the_store_holds_its_port_from_choice_to_group():
    """The port travels to the other ranks while the socket that owns it stays bound: an
    interloper cannot take it (the old ``s.bind(("", 0)); close()`` let it), and every rank's
    store is on that very port, rank 0's the very server that was bound."""
    learner, engine = SimpleNamespace(), SimpleNamespace()
    port = open_store(learner)
    server = learner._ragen2_rendezvous_stores[port]
    assert server.port == port != 0
    assert _taken(port)  # between the choice and the join: what the race needed is impossible
    stores: dict[int, object] = {}
    t = threading.Thread(target=lambda: stores.__setitem__(
        1, join_store(engine, "127.0.0.1", port, 2, 1, TIMEOUT)))
    t.start()
    stores[0] = join_store(learner, "127.0.0.1", port, 2, 0, TIMEOUT)
    t.join(60)
    assert stores[0] is server and stores[1].port == port
    assert learner._ragen2_rendezvous_stores == {}  # taken once: the next group binds anew
    stores[1].set("hello", "from rank 1")
    assert server.get("hello") == b"from rank 1"


def test_a_learner_ranks_group_forms_on_the_store_its_address_bound(monkeypatch):
    """LearnerRank.address (asked of rank 0 through Ray) binds the store; setup hands that store
    to init_process_group, so the port rank 0 reports is the port the group uses."""
    import torch.distributed as dist

    from ragen2.controller import learner_settings
    from ragen2.learner import build
    from ragen2.learner.rank import LearnerRank
    from ragen2.train import load_config

    cfg = load_config(["cluster.learner_world_size=1"])
    r = LearnerRank(cfg, "unused", 0, 1, threads=1, settings=learner_settings(cfg))
    seen = {}
    init = dist.init_process_group
    monkeypatch.setattr(dist, "init_process_group",
                        lambda *a, **k: (seen.update(k), init(*a, **k))[1])
    monkeypatch.setattr(build, "build_models", lambda *a, **k: None)  # the rendezvous only
    addr, port = r.address("127.0.0.1")
    assert _taken(port)
    r.setup(addr, port)
    try:
        assert seen["store"].port == port and dist.get_world_size() == 1
    finally:
        r.shutdown()
    # a group of one needs no address first: port 0 binds a port the OS assigns
    r.setup("127.0.0.1", 0)
    try:
        assert seen["store"].port not in (0, port)
    finally:
        r.shutdown()


def test_port_0_is_refused_where_the_other_ranks_need_rank_0s_port():
    with pytest.raises(ValueError, match="rank 0's port"):
        join_store(SimpleNamespace(), "127.0.0.1", 0, 2, 0, TIMEOUT)
    with pytest.raises(ValueError, match="rank 0's rendezvous port"):
        join_store(SimpleNamespace(), "127.0.0.1", 0, 2, 1, TIMEOUT)


def test_a_rank_that_never_joins_fails_the_rendezvous_in_its_timeout():
    """Every rank waits for all (as torch's own store waited for its workers on rank 0)."""
    from torch.distributed import DistStoreError

    holder = SimpleNamespace()
    port = open_store(holder)
    t0 = time.monotonic()
    with pytest.raises(DistStoreError):
        join_store(holder, "127.0.0.1", port, 2, 0, datetime.timedelta(seconds=1))
    assert time.monotonic() - t0 >= 1.0  # a lower bound: it waited, load cannot shorten that


def test_spawned_ranks_get_rank_0s_port_through_the_rendezvous():
    """SpawnRendezvous (tests/learner/two_ranks.py, benchmarks): rank 0 opens, the others
    receive its port, once per group and in order."""
    import multiprocessing as mp

    rdv = SpawnRendezvous(3, mp.get_context("spawn"))
    holders = [SimpleNamespace() for _ in range(3)]
    got: dict[int, list[int]] = {1: [], 2: []}
    others = [threading.Thread(target=lambda r=r: got[r].extend(rdv.port(r) for _ in range(2)))
              for r in (1, 2)]
    [t.start() for t in others]
    sent = [rdv.port(0, lambda: open_store(holders[0])) for _ in range(2)]
    [t.join(60) for t in others]
    assert got == {1: sent, 2: sent} and len(set(sent)) == 2
    assert set(holders[0]._ragen2_rendezvous_stores) == set(sent)


# ------------------------------------------- servers that bind a port they are told (Ray's head)
def test_spare_ports_lie_outside_the_range_the_os_hands_out():
    """No bind to port 0 and no outgoing connection can take a spare port before its server
    binds it; none is handed out twice in one process."""
    lo, hi = _ephemeral()
    ports = [spare_port() for _ in range(20)]
    assert len(set(ports)) == 20
    assert all(p >= 20000 and not lo <= p <= hi for p in ports), ports


def test_a_taken_port_is_told_from_other_failures(tmp_path):
    """The sbatch tests start Ray's head again on new ports when its failure was a taken port:
    Ray's own message, gRPC's in the GCS log, the OS's."""
    assert port_clash("ValueError: Failed to bind to 0.0.0.0:8265 because it's already occupied.")
    assert port_clash("OSError: [Errno 98] Address already in use")
    assert not port_clash("TimeoutError: 1 of 2 nodes joined")
    logs = tmp_path / "session_x" / "logs"
    logs.mkdir(parents=True)
    since = time.time() - 1.0
    assert not port_clash("", tmp_path, since)
    (logs / "gcs_server.err").write_text("E grpc_server.cc: Failed to add port to server\n")
    assert port_clash("", tmp_path, since)
    assert not port_clash("", tmp_path, since + 3600)  # only what this attempt wrote counts
