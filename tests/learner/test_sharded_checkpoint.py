"""Sharded checkpoints (torch.distributed.checkpoint): written by two FSDP2 ranks on gloo, resumed
exactly by two ranks and resumed by one (another world size: the shards are resharded on load).

``_worker`` runs in the learner tests' one shared spawn (tests/learner/two_ranks.py); the
one-rank resume runs in the test process.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.learner.test_rank import _batch
from tests.learner.pinned import pinned

OVERRIDES = ("algorithm.lr=1e-3", "algorithm.kl_coef=0.1", "algorithm.ppo_mini_batches=2")


def _batch_v(version: int) -> dict[str, np.ndarray]:
    return {**_batch(), "policy_version": np.full(6, version, np.int64)}


def _learner(path: str, rank: int, world: int, rdv=None):
    """A learner rank set up with the others through ``rdv`` (a SpawnRendezvous), or alone."""
    from ragen2.learner.rank import LearnerRank
    from ragen2.controller import learner_settings
    from ragen2.train import load_config

    cfg = load_config(pinned(f"cluster.learner_world_size={world}", *OVERRIDES))
    r = LearnerRank(cfg, path, rank, world, threads=1, settings=learner_settings(cfg))
    if rdv is None:
        r.setup("127.0.0.1", 0)  # one rank: its store binds a port the OS assigns
    else:
        rdv.setup(r)
    return r


def _worker(rank: int, path: str, rdv, out_dir: str) -> None:
    """Both ranks: update, save (sharded), update again; then a fresh pair loads and repeats the
    second update."""
    torch.set_num_threads(1)
    ckpt = f"{out_dir}/ckpt"
    if rank == 0:
        import os

        os.makedirs(ckpt, exist_ok=True)
    result = {}
    r = _learner(path, rank, 2, rdv)
    try:
        r.update(_batch_v(0), step=1)
        r.barrier()  # rank 0 made the directory
        r.save(ckpt)
        result["saved"] = {k: v.clone() for k, v in r.named_weights()}
        result["after"] = r.update(_batch_v(1), step=2)
        result["after_weights"] = {k: v.clone() for k, v in r.named_weights()}
    finally:
        r.shutdown()
    r = _learner(path, rank, 2, rdv)
    try:
        result["version"] = r.load(ckpt)
        result["resumed"] = r.update(_batch_v(1), step=2)
        result["resumed_weights"] = {k: v.clone() for k, v in r.named_weights()}
    finally:
        r.shutdown()
    torch.save(result, f"{out_dir}/rank{rank}.pt")


def test_sharded_checkpoint_resumes_exactly_and_on_one_rank(tiny_model_path, two_rank_results,
                                                            tmp_path_factory):
    from pathlib import Path

    from ragen2.learner.sharded import read_model_state

    r0, r1 = two_rank_results["sharded"]
    ckpt = Path(two_rank_results["sharded_dir"]) / "ckpt"
    files = {p.name for p in ckpt.iterdir()}
    assert {"policy", "ref", "rng_rank0.pt", "rng_rank1.pt"} <= files and "policy.pt" not in files
    shards = sorted(p.name for p in (ckpt / "policy").iterdir())
    assert shards == [".metadata", "__0_0.distcp", "__1_0.distcp"]  # one file per rank, no gather
    # same world size: the resumed pair makes exactly the update the original pair made
    assert r0["version"] == r1["version"] == 1
    for k in ("actor/loss", "actor/grad_norm", "actor/kl_loss"):
        assert r0["resumed"][k] == r0["after"][k], k
    for k, v in r0["after_weights"].items():
        assert torch.equal(r0["resumed_weights"][k], v), k
    # read on one process without a process group (ragen2 export): the full saved policy
    full = read_model_state(ckpt)
    for k, v in r0["saved"].items():
        assert torch.equal(full[k], v), k

    # another world size: one rank loads the two ranks' shards
    from tests.learner.test_sharded_checkpoint import _learner

    r = _learner(tiny_model_path, 0, 1)
    try:
        assert r.load(str(ckpt)) == 1
        for k, v in r.named_weights():
            assert torch.equal(v, r0["saved"][k]), k
        m = r.update(_batch_v(1), step=2)
        one = dict(r.named_weights())
    finally:
        r.shutdown()
    # the same update up to the order of float sums (the optimiser state came along: a fresh
    # AdamW's first step would move every weight by ~lr instead)
    assert m["actor/loss"] == pytest.approx(r0["after"]["actor/loss"], rel=1e-5, abs=1e-7)
    for k, v in r0["after_weights"].items():
        torch.testing.assert_close(one[k], v, rtol=1e-5, atol=1e-6, msg=k)
