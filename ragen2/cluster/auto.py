"""Config values chosen by the machine: ``model.dtype=auto`` and the learner's null memory knobs.

:func:`ragen2.compose.to_config` calls :func:`resolve_dtype` before its checks and
:func:`resolve_memory_knobs` after them, so a typed config never holds ``auto`` or ``null`` there
and everything downstream (learner, engines, probe tolerance, the estimates) reads concrete values:

* ``model.dtype: auto``: on CUDA ``bfloat16`` (the preflight refuses a GPU without bf16); on the
  CPU ``bfloat16`` where the CPU has bf16 dot-product instructions (``avx512_bf16`` or ``amx_bf16``
  in ``/proc/cpuinfo``: 4.1x fp32's matmul speed there) and ``float32`` elsewhere (AVX2-only
  machines ran bf16 ~10x slower than fp32). ``RAGEN2_CPU_BF16=0/1`` overrides the probe.
* ``learner.micro_batch_tokens`` / ``learner.activation_checkpointing: null``: on the CPU the
  fastest pair whose host-memory estimate fits this machine (:func:`plan_host_memory`); on CUDA
  the pretrained recipe's values (4096 tokens, no checkpointing).
* ``engine.hf_max_batch: null`` with ``engine=hf``: 256 (what the HF engine always used), or on
  the CPU the largest batch that fits when 256 does not (:func:`plan_host_memory`).

Each choice is logged (logger ``ragen2``) with its reason.
"""

from __future__ import annotations

import logging
import os
from dataclasses import replace

from ragen2.config import Config

log = logging.getLogger("ragen2")


def auto_dtype(device: str, cpuinfo: str | None = None) -> tuple[str, str]:
    """(dtype, why) for ``model.dtype=auto`` on ``device``."""
    if device == "cuda":
        return "bfloat16", "CUDA (bf16 mixed precision)"
    from ragen2.cluster.host import BF16_FLAGS, cpu_bf16

    forced = os.environ.get("RAGEN2_CPU_BF16")
    if forced in ("0", "1"):
        return ("bfloat16" if forced == "1" else "float32"), f"RAGEN2_CPU_BF16={forced}"
    if cpu_bf16(cpuinfo):
        return "bfloat16", f"this CPU has {' or '.join(BF16_FLAGS)} (bf16 matmuls in hardware)"
    return "float32", (f"this CPU has neither {' nor '.join(BF16_FLAGS)} (bf16 would be ~10x "
                       "slower than fp32 here)")


def resolve_dtype(cfg: Config) -> Config:
    """``cfg`` with ``model.dtype=auto`` replaced by this machine's choice (logged)."""
    if cfg.model.dtype != "auto":
        return cfg
    dtype, why = auto_dtype(cfg.cluster.device)
    log.info("model.dtype=auto: %s (%s)", dtype, why)
    return replace(cfg, model=replace(cfg.model, dtype=dtype))


def resolve_memory_knobs(cfg: Config) -> Config:
    """``cfg`` with null ``learner.micro_batch_tokens`` / ``activation_checkpointing`` (and with
    ``engine=hf`` ``engine.hf_max_batch``) planned."""
    lc = cfg.learner
    if (lc.micro_batch_tokens is not None and lc.activation_checkpointing is not None
            and (cfg.engine.name != "hf" or cfg.engine.hf_max_batch is not None)):
        return cfg
    from ragen2.cluster.host_memory import apply_plan, plan_host_memory

    plan = plan_host_memory(cfg)
    log.info("memory plan (%s): %s", "host-memory estimate" if cfg.cluster.device == "cpu"
             else "CUDA defaults", ", ".join(f"{k}={v}" for k, v in plan.items()
                                             if v is not None or not k.startswith("engine.")))
    return apply_plan(cfg, plan)
