"""``cluster.layout=split`` on the CPU: the core split, by hand, and the pinning of a process."""

from __future__ import annotations

import multiprocessing as mp
import os
import threading

import pytest

from ragen2.cluster.cores import CoreSplit, claim_cpu, split_cores


@pytest.mark.parametrize("cores, learner, engines", [
    ([0, 1], (0,), (1,)),
    ([3, 1, 2, 0], (0, 1), (2, 3)),  # sorted first
    ([4, 5, 6], (4, 5), (6,)),  # an odd count: the learner gets the extra core
    ({7, 9, 8, 10, 11}, (7, 8, 9), (10, 11)),
])
def test_the_learner_takes_the_first_half_of_the_cores(cores, learner, engines):
    assert split_cores(cores) == CoreSplit(learner, engines)


@pytest.mark.parametrize("cores", [[], [0], [2, 2]])
def test_fewer_than_two_cores_cannot_be_split(cores):
    with pytest.raises(ValueError, match=r"cluster.layout=split on the CPU needs at least 2 cores"):
        split_cores(cores)


def test_threads_share_each_side_between_its_actors():
    split = CoreSplit((0, 1, 2, 3), (4, 5))
    assert split.threads(learner_world_size=2, num_workers=1) == (2, 2)
    assert split.threads(learner_world_size=1, num_workers=2) == (4, 1)
    assert split.threads(learner_world_size=8, num_workers=4) == (1, 1)  # at least one


def _pinned(target: int, out) -> None:
    """In a child process: a thread started before the pinning and one started after."""
    seen: dict[str, set[int]] = {}
    before_ready, pinned = threading.Event(), threading.Event()

    def early() -> None:
        before_ready.set()
        pinned.wait()
        seen["before"] = os.sched_getaffinity(0)  # this thread's own mask

    t = threading.Thread(target=early)
    t.start()
    before_ready.wait()
    claim_cpu(1, [target])
    pinned.set()
    t.join()
    late = threading.Thread(target=lambda: seen.__setitem__("after", os.sched_getaffinity(0)))
    late.start()
    late.join()
    seen["main"] = os.sched_getaffinity(0)
    import torch

    seen["torch_threads"] = torch.get_num_threads()
    out.put(seen)


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs Linux affinity")
def test_every_thread_of_the_process_is_pinned_and_new_threads_inherit():
    """``claim_cpu``, as an actor calls it first: a thread that already ran when the process was
    pinned (as Ray's and gloo's do in an actor) is moved too, a thread started later inherits the
    mask, and torch uses the given thread count."""
    target = max(os.sched_getaffinity(0))
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    p = ctx.Process(target=_pinned, args=(target, out))
    p.start()
    seen = out.get(timeout=60)
    p.join(60)
    assert seen == {"before": {target}, "after": {target}, "main": {target}, "torch_threads": 1}
    assert os.sched_getaffinity(0) != {target} or os.cpu_count() == 1  # this process untouched
