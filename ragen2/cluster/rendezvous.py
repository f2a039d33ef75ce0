"""Rendezvous stores that never race for a port.

A process group meets at a ``torch.distributed.TCPStore`` served by its rank 0. Choosing a "free"
port by binding port 0, closing that socket and handing the number to ``init_process_group``
(``MASTER_PORT``) leaves a window in which any other process may take the port: the group then
fails with ``EADDRINUSE``. Here rank 0's store itself binds port 0, so the OS assigns the port to
the socket that keeps it, and the other ranks learn the port afterwards:

* :func:`open_store` binds the server on its holder (a learner rank, a weight-sync group's
  rank 0) and returns the port; the holder's node IP and that port travel to the other ranks
  (through Ray: :meth:`ragen2.learner.rank.LearnerRank.address`; through a queue between spawned
  processes: :class:`SpawnRendezvous`);
* :func:`join_store` is each rank's store for the group: on rank 0 the server that
  :func:`open_store` left on the holder, on the others a client of ``addr:port``.

The server listens on every interface (TCPStore binds the wildcard address), so ranks on other
nodes reach it at rank 0's node IP exactly as they reached ``MASTER_ADDR:MASTER_PORT`` before.
"""

from __future__ import annotations

import datetime
from typing import Any, Sequence

#: the stores :func:`open_store` bound, by port, on their holder until :func:`join_store` takes one
_HELD = "_ragen2_rendezvous_stores"
#: torch's default for a process group's store (``default_pg_timeout``: the env:// rendezvous)
DEFAULT_TIMEOUT = datetime.timedelta(minutes=30)
#: the keys :func:`join_store` counts the group's ranks with (the process groups built on the
#: store prefix theirs: ``default_pg``, ``ragen2_weight_sync``)
_JOINED = "ragen2_rendezvous/joined"


def open_store(holder: Any, host: str = "127.0.0.1",
               timeout: datetime.timedelta = DEFAULT_TIMEOUT) -> int:
    """Bind a group's rendezvous server on a port the OS assigns, keep it on ``holder`` for
    :func:`join_store` and return the port. ``host``: where this process's own client of the
    store connects (the server listens on every interface). The server itself waits for no
    one (:func:`join_store` waits for every rank), so it needs no world size."""
    import torch.distributed as dist

    store = dist.TCPStore(host, 0, None, is_master=True, wait_for_workers=False,
                          timeout=timeout)
    held = holder.__dict__.setdefault(_HELD, {})
    held[store.port] = store
    return store.port


def join_store(holder: Any, addr: str, port: int, world_size: int, rank: int,
               timeout: datetime.timedelta = DEFAULT_TIMEOUT) -> Any:
    """This rank's store for the group that meets at ``addr:port``, once all ``world_size``
    ranks have joined it (``DistStoreError`` after ``timeout`` if one never does, as torch's own
    rendezvous raises).

    Rank 0: the server :func:`open_store` bound on ``holder`` at ``port``; if there is none, a
    server bound now: with ``port=0`` the OS assigns it (enough for a group of one; a larger
    group needs the port before its other ranks start, so :func:`open_store`), with another port
    that very port (the caller chose it: the old pick-then-bind, kept for callers outside
    ragen2). Other ranks: a client of ``addr:port``, which waits up to ``timeout`` for it."""
    import torch.distributed as dist

    if rank == 0:
        store = getattr(holder, _HELD, {}).pop(port, None)
        if store is not None:
            store.set_timeout(timeout)
        elif port == 0 and world_size > 1:
            raise ValueError(f"a group of {world_size} cannot meet on port 0: its other ranks "
                             "need rank 0's port first (ragen2.cluster.rendezvous.open_store)")
        else:
            store = dist.TCPStore(addr, port, world_size, is_master=True,
                                  wait_for_workers=False, timeout=timeout)
    elif port == 0:
        raise ValueError(f"rank {rank} needs rank 0's rendezvous port, not 0 "
                         "(ragen2.cluster.rendezvous.open_store)")
    else:
        store = dist.TCPStore(addr, port, world_size, is_master=False, timeout=timeout)
    # every rank waits for all (the server does not: torch's wait_for_workers waited on rank 0)
    store.set(f"{_JOINED}/{rank}", "1")
    store.wait([f"{_JOINED}/{r}" for r in range(world_size)], timeout)
    return store


class SpawnRendezvous:
    """Ranks started as local processes (``multiprocessing`` spawn: tests, benchmarks) meet
    without a port chosen in advance: rank 0 binds each group's store (:meth:`LearnerRank.address
    <ragen2.learner.rank.LearnerRank.address>`) and sends its port to the other ranks through one
    queue each. Create it in the parent, pass it to every rank's process, and call
    :meth:`setup` (learner ranks) or :meth:`port` once per group, in the same order on every rank.
    """

    def __init__(self, world_size: int, ctx: Any = None, host: str = "127.0.0.1",
                 timeout_s: float = 1800.0) -> None:
        import multiprocessing as mp

        ctx = ctx or mp.get_context("spawn")
        self.world_size, self.host, self.timeout_s = world_size, host, timeout_s
        self.queues: Sequence[Any] = [ctx.Queue() for _ in range(world_size - 1)]

    def port(self, rank: int, open_port: Any = None) -> int:
        """Rank 0: ``open_port()`` (it binds the store and returns its port), sent to the others;
        other ranks: the port rank 0 sent for this group."""
        if rank == 0:
            port = int(open_port())
            for q in self.queues:
                q.put(port)
            return port
        return int(self.queues[rank - 1].get(timeout=self.timeout_s))

    def setup(self, learner: Any) -> None:
        """``learner.setup`` (a :class:`~ragen2.learner.rank.LearnerRank`) at rank 0's store."""
        port = self.port(learner.rank, lambda: learner.address(self.host)[1])
        learner.setup(self.host, port)
