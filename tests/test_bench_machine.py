"""benchmarks/common.machine: the machine a benchmark ran on, including whether its CPU computes
``model.dtype=auto`` in bf16 (machines of this kind differ; a wall time means little without it)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from common import machine  # noqa: E402


@pytest.mark.parametrize("has_bf16", [True, False])
def test_the_machine_record_says_whether_the_cpu_has_bf16(monkeypatch, has_bf16):
    import ragen2.cluster.host as host

    monkeypatch.setattr(host, "cpu_bf16", lambda cpuinfo=None: has_bf16)
    m = machine()
    assert m["cpu_bf16"] is has_bf16 and m["cpus"] >= 1


def test_the_record_reads_the_flags_from_cpuinfo():
    from ragen2.cluster.host import BF16_FLAGS, cpu_bf16

    flags = "flags\t\t: fpu sse2 avx512f " + BF16_FLAGS[0] + "\n"
    assert cpu_bf16(flags) and not cpu_bf16("flags\t\t: fpu sse2 avx2\n")
    assert machine()["cpu_bf16"] is cpu_bf16()
