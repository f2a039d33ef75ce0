"""Shared fixtures: one tiny model and one Ray session per test process."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Tests build their tiny model and warm starts in the repo's own cache, not the user's.
os.environ.setdefault("RAGEN2_CACHE", os.path.join(os.path.dirname(os.path.dirname(__file__)),
                                                   ".cache", "test"))


@pytest.fixture(scope="session")
def base_config():
    from ragen2.train import load_config

    return load_config([])


@pytest.fixture(scope="session")
def tiny_model_path(base_config) -> str:
    """The default tiny model (built once into the cache, shared by every test)."""
    from ragen2.train import resolve_model_path

    return resolve_model_path(base_config)


@pytest.fixture(scope="session")
def tiny_tokenizer(tiny_model_path):
    from ragen2.models.loading import load_tokenizer

    return load_tokenizer(tiny_model_path)


@pytest.fixture(scope="session")
def hf_engine(tiny_model_path):
    from ragen2.engines.hf import HFEngine

    return HFEngine(tiny_model_path)


@pytest.fixture(scope="session")
def four_steps(ray_session, tiny_model_path, tmp_path_factory):
    """One uninterrupted 4-step run of tests.runs' small config (the reference of the resume
    tests, in-process and through the CLI after kill -9)."""
    from ragen2.train import load_config, train
    from tests.runs import small

    run_dir = tmp_path_factory.mktemp("four")
    train(load_config(small(tiny_model_path, "trainer.total_steps=4", "trainer.save_every=2")), run_dir)
    return run_dir


@pytest.fixture(scope="session")
def hf_ppo_mixed(ray_session, tiny_model_path, tmp_path_factory):
    """One tier-2 run for several tests (its config: ``tests.runs.hf_ppo_mixed``): the HF engine,
    PPO with a critic and a KL reference, a mix of envs, 4 steps, a checkpoint every step; also
    the uninterrupted reference of the kill -9 test."""
    from ragen2.train import load_config, train
    from tests.runs import hf_ppo_mixed as config

    run = tmp_path_factory.mktemp("hf_ppo_mixed")
    train(load_config(config(tiny_model_path)), run)
    return run


@pytest.fixture(scope="session")
def ray_session():
    import ray

    if not ray.is_initialized():
        # "local": this session's own Ray, never a cluster another job started on this machine
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


#: session fixtures that cost a training run: under pytest-xdist every test that uses one runs in
#: the same worker process, so each is computed once per test run
SHARED_RUNS = ("four_steps", "hf_ppo_mixed")


def pytest_collection_modifyitems(config, items):
    """Tests sharing an expensive session fixture go to one xdist worker (``--dist loadgroup``);
    GPU-marked tests are skipped without CUDA (launch/gpu_check.sh runs them on a GPU)."""
    import torch

    for item in items:
        shared = [f for f in SHARED_RUNS if f in getattr(item, "fixturenames", ())]
        if shared:
            item.add_marker(pytest.mark.xdist_group(shared[0]))
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (run launch/gpu_check.sh on one)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def smollm2_path() -> str:
    """SmolLM2-135M-Instruct converted once into the cache (skipped without the smollm2 extra)."""
    from ragen2.models.smollm2 import MissingPackageError, ensure_smollm2

    try:
        return str(ensure_smollm2())
    except MissingPackageError as e:
        pytest.skip(str(e))


@pytest.fixture(scope="session")
def smollm2_tokenizer():
    """SmolLM2's tokenizer alone: read from the GGUF file's metadata, the weights never converted
    (the converted model's own directory when a test already built it)."""
    from ragen2.models.loading import load_tokenizer
    from ragen2.models.smollm2 import MissingPackageError, ensure_smollm2_tokenizer

    try:
        return load_tokenizer(ensure_smollm2_tokenizer())
    except MissingPackageError as e:
        pytest.skip(str(e))
