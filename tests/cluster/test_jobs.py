"""Sweep jobs on a shared node: each its own Ray (never another job's) and its own GPUs."""

from __future__ import annotations

import pytest

from ragen2.cluster import jobs
from ragen2.cluster.jobs import (GpuSliceError, claim_gpus, gpu_slice, gpus_per_job, ray_address,
                                 slots)
from ragen2.train import load_config


def test_no_address_means_a_fresh_local_ray_even_with_ray_address_set(monkeypatch):
    """ray.init(address=None) would join RAY_ADDRESS or the newest `ray start` on this machine."""
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.9:6379")
    assert ray_address(load_config([])) == "local"
    monkeypatch.delenv("RAY_ADDRESS")
    assert ray_address(load_config([])) == "local"


@pytest.mark.parametrize("address", ["auto", "10.0.0.1:6379", "ray://head:10001"])
def test_an_explicit_address_is_joined(address):
    assert ray_address(load_config([f"cluster.address={address}"])) == address


def test_ensure_ray_passes_local(monkeypatch):
    import ray

    from ragen2 import train

    seen = {}
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kw: seen.update(kw))
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.9:6379")
    train.ensure_ray(load_config([]))
    assert seen["address"] == "local"
    train.ensure_ray(load_config(["cluster.address=auto"]))
    assert seen["address"] == "auto"


def test_gpus_per_job_by_layout():
    assert gpus_per_job(load_config([])) == 0  # the CPU default
    assert gpus_per_job(load_config(["+experiment=ragen2_sokoban_0.5b"])) == 1
    assert gpus_per_job(load_config(["+experiment=ragen2_sokoban"])) == 8
    assert gpus_per_job(load_config(["+experiment=ragen2_sokoban", "cluster=gpu_8_split"])) == 8
    assert gpus_per_job(load_config(["+experiment=ragen2_sokoban", "cluster=gpu_8_split",
                                     "engine.tensor_parallel_size=2"])) == 12


def test_gpu_slices_split_the_visible_list_by_job():
    visible = ["0", "1", "2", "3", "4", "5", "6", "7"]
    assert gpu_slice(visible, 2, 0) == ["0", "1"]
    assert gpu_slice(visible, 2, 3) == ["6", "7"]
    assert gpu_slice(["4", "5", "6", "7"], 1, 2) == ["6"]  # CUDA_VISIBLE_DEVICES as SLURM set it
    with pytest.raises(GpuSliceError):
        gpu_slice(visible, 2, 4)
    assert slots(visible, 2, 4) == 4
    with pytest.raises(GpuSliceError, match="hydra.launcher.n_jobs=5 .* Lower hydra.launcher.n_jobs to 4"):
        slots(visible, 2, 5)


def test_claims_prefer_the_job_number_and_never_overlap(tmp_path):
    visible = ["0", "1", "2", "3"]
    with claim_gpus(tmp_path, visible, 1, job_num=0, parallel=4) as a:
        assert a == ["0"]
        with claim_gpus(tmp_path, visible, 1, job_num=5, parallel=4) as b:
            assert b == ["1"]  # job 5 -> slot 1
            # job 4 starts while job 0 (same slot) still runs: it gets a free slice instead
            with claim_gpus(tmp_path, visible, 1, job_num=4, parallel=4) as c:
                assert c == ["2"]
                with claim_gpus(tmp_path, visible, 1, job_num=3, parallel=4) as d:
                    assert d == ["3"]
                    with pytest.raises(GpuSliceError, match="held by running jobs"):
                        with claim_gpus(tmp_path, visible, 1, job_num=6, parallel=4):
                            pass
    with claim_gpus(tmp_path, visible, 1, job_num=4, parallel=4) as again:
        assert again == ["0"]  # released when the jobs ended


def test_outside_a_joblib_sweep_nothing_changes(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    with jobs.sweep_job_gpus(load_config(["+experiment=ragen2_sokoban_0.5b"])) as mine:
        assert mine is None  # no Hydra job here
    import os

    assert os.environ["CUDA_VISIBLE_DEVICES"] == "0,1"


def test_joblib_sweep_job_gets_its_slice(monkeypatch, tmp_path):
    """A stand-in for HydraConfig.get() of joblib job 3 of 2-at-once on 4 GPUs."""
    import os

    from hydra.core import hydra_config
    from hydra.types import RunMode
    from omegaconf import OmegaConf

    hc = OmegaConf.create({"mode": RunMode.MULTIRUN, "job": {"num": 3},
                           "sweep": {"dir": str(tmp_path)},
                           "launcher": {"_target_": "hydra_plugins.hydra_joblib_launcher."
                                        "joblib_launcher.JoblibLauncher", "n_jobs": 2}})
    monkeypatch.setattr(hydra_config.HydraConfig, "get", staticmethod(lambda: hc))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5,6,7")
    cfg = load_config(["+experiment=ragen2_sokoban_0.5b", "cluster.learner_world_size=2",
                       "rollout.num_workers=2"])
    with jobs.sweep_job_gpus(cfg) as mine:
        assert mine == ["6", "7"] and os.environ["CUDA_VISIBLE_DEVICES"] == "6,7"
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "4,5,6,7"
    hc.launcher.n_jobs = 3  # 3 x 2 GPUs > 4
    with pytest.raises(GpuSliceError, match="n_jobs=3"):
        with jobs.sweep_job_gpus(cfg):
            pass
    hc.launcher._target_ = "hydra._internal.core_plugins.basic_launcher.BasicLauncher"
    with jobs.sweep_job_gpus(cfg) as mine:
        assert mine is None  # one job at a time: the whole node is the job's
