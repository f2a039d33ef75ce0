"""What this machine's CPU and memory offer, read from ``/proc`` (Linux) without starting anything.

:func:`cpu_bf16` says whether the CPU computes bf16 matrix products in hardware (AVX-512 BF16 or
AMX): there torch 2.13's bf16 matmul ran 4.1x faster than fp32 (718 vs 176 GFLOP/s, 2048^2, 2
threads), while on AVX2-only machines of the same kind bf16 was ~10x *slower* than fp32
(``../shared/PLATFORM.md``), so ``model.dtype=auto`` takes bf16 only where this says yes.
:func:`host_memory` reads ``MemTotal`` and ``MemAvailable`` for the CPU memory plan
(:mod:`ragen2.cluster.host_memory`). The parsers take the file's text, so tests feed them
hand-written ``/proc`` contents.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

#: flags of /proc/cpuinfo that mean bf16 dot products in hardware (either is enough)
BF16_FLAGS = ("avx512_bf16", "amx_bf16")


def cpu_flags(cpuinfo: Optional[str] = None) -> set[str]:
    """The ``flags`` of the first processor in ``/proc/cpuinfo`` (empty when it cannot be read)."""
    if cpuinfo is None:
        try:
            with open("/proc/cpuinfo", encoding="utf-8") as f:
                cpuinfo = f.read()
        except OSError:
            return set()
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            return set(value.split())
    return set()


def cpu_bf16(cpuinfo: Optional[str] = None) -> bool:
    """Whether the CPU has bf16 dot-product instructions (:data:`BF16_FLAGS`)."""
    return bool(cpu_flags(cpuinfo) & set(BF16_FLAGS))


@dataclass(frozen=True)
class HostMemory:
    """Bytes of the machine's memory: all of it, and what the kernel says is available now
    (free plus reclaimable caches: what new processes can take without swapping)."""

    total: int
    available: int


def host_memory(meminfo: Optional[str] = None) -> Optional[HostMemory]:
    """``MemTotal`` and ``MemAvailable`` of ``/proc/meminfo``; None where it cannot be read."""
    if meminfo is None:
        try:
            with open("/proc/meminfo", encoding="utf-8") as f:
                meminfo = f.read()
        except OSError:
            return None
    values = {}
    for line in meminfo.splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            values[key.strip()] = int(parts[0]) * (1024 if parts[1:2] == ["kB"] else 1)
    if "MemTotal" not in values:
        return None
    return HostMemory(values["MemTotal"], values.get("MemAvailable", values.get("MemFree", 0)))
