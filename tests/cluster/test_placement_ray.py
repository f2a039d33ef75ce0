"""Placement groups in a real (CPU-only) Ray: reservation, actor options, timeout, GPU sharing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from ragen2.cluster.placement import (ActorSlot, GroupSpec, Placement, PlacementError,
                                      PlacementPlan, create_placement_group, place)


def cpu_bundle_plan(cpus_per_bundle: float = 1.0) -> PlacementPlan:
    """A split-shaped plan over CPU bundles, so it can be reserved on this machine."""
    group = GroupSpec(({"CPU": cpus_per_bundle}, {"CPU": cpus_per_bundle}), "PACK", "test")
    return PlacementPlan("cuda", "split", (group,), (ActorSlot(0, 0, 0.0, 0.5),),
                         (ActorSlot(0, 1, 0.0, 0.5, (1,)),))


def test_actors_run_in_their_bundles(ray_session):
    ray = ray_session

    @ray.remote
    class Where:
        def pg(self) -> str:
            ctx = ray.get_runtime_context()
            return ctx.get_placement_group_id()

    placement = create_placement_group(cpu_bundle_plan(), timeout_s=60)
    try:
        pg_id = placement.groups[0].id.hex()
        a = Where.options(**placement.learner_options(0)).remote()
        b = Where.options(**placement.worker_options(0)).remote()
        assert ray.get([a.pg.remote(), b.pg.remote()]) == [pg_id, pg_id]
        # T == 1: no engine shards, only the GPU actors' environment (ACTOR_ENV)
        assert placement.worker_options(0)["runtime_env"] == {"env_vars": {"NCCL_CUMEM_ENABLE": "0"}}
        ray.kill(a)
        ray.kill(b)
    finally:
        placement.remove()
    assert placement.groups == []


def test_unreservable_plan_times_out_with_a_clear_error(ray_session):
    from ray.util import placement_group_table

    before = {k for k, v in placement_group_table().items() if v["state"] != "REMOVED"}
    with pytest.raises(PlacementError, match="could not reserve 1 of 1 placement groups within 1 s"):
        create_placement_group(cpu_bundle_plan(cpus_per_bundle=64), timeout_s=1)
    after = {k for k, v in placement_group_table().items() if v["state"] != "REMOVED"}
    assert after <= before  # the pending group was removed, not left waiting


def test_cpu_config_reserves_nothing(base_config):
    placement = place(base_config)
    assert isinstance(placement, Placement) and placement.groups == []
    assert placement.learner_options(0) == {"num_cpus": 0.0, "num_gpus": 0.0}
    assert placement.worker_options(0) == {"num_cpus": 0.0, "num_gpus": 0.0}


@pytest.mark.e2e
def test_logical_gpus_are_shared_and_split_as_planned():
    """A separate Ray with 4 logical GPUs: which GPU ids each actor really gets (~10 s)."""
    script = Path(__file__).with_name("logical_gpus.py")
    env = {**os.environ, "RAY_AUTH_MODE": "disabled"}
    env.pop("RAY_ADDRESS", None)
    # its own session: if it hangs, its Ray processes are ended with it (by session id)
    job = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, env=env,
                           cwd=Path(__file__).parents[2], start_new_session=True)
    try:
        stdout, stderr = job.communicate(timeout=240)
    finally:
        ps = subprocess.run(["ps", "-eo", "pid=,sid="], capture_output=True, text=True).stdout
        for pid, sid in (ln.split() for ln in ps.splitlines()):
            if int(sid) == job.pid:
                os.kill(int(pid), signal.SIGKILL)
    assert job.returncode == 0, stderr[-3000:]
    out = json.loads(stdout.strip().splitlines()[-1])
    co = out["colocated"]  # T == 1: rollout worker i is on learner rank i's GPU
    assert co["workers"] == co["learners"] and sorted(sum(co["learners"], [])) == ["0", "1", "2", "3"]
    tp2 = out["colocated_tp2"]  # T == 2: engine i's shards are on ranks 2i and 2i+1's GPUs
    assert tp2["workers"] == [[], []]
    assert tp2["shards"] == [[tp2["learners"][0], tp2["learners"][1]],
                             [tp2["learners"][2], tp2["learners"][3]]]
    split = out["split_tp2"]  # the engine owns 2 whole GPUs, none of the learners'
    assert len(split["workers"][0]) == 2
    assert not set(split["workers"][0]) & set(sum(split["learners"], []))
