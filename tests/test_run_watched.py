"""benchmarks/common.run_watched: the CPU other processes used while a command ran, without the
command's own process tree. No run: two short busy loops."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from common import run_watched  # noqa: E402

BUSY = "import time\nt = time.process_time()\nwhile time.process_time() - t < {s}: pass\n"


def test_foreign_cpu_is_counted_and_the_commands_own_grandchild_is_not(tmp_path):
    # the watched command burns ~1.5 CPU-s in a grandchild; a foreign process burns ~1.5 CPU-s
    inner = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {BUSY.format(s=1.5)!r}])"
    foreign = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.3)\n" + BUSY.format(s=1.5)])
    busy0 = psutil.cpu_times()
    try:
        w = run_watched([sys.executable, "-c", inner], tmp_path / "log", every_s=0.2)
    finally:
        foreign.wait()
    busy1 = psutil.cpu_times()
    system = sum(getattr(busy1, f) - getattr(busy0, f) for f in ("user", "system", "nice"))
    assert w["returncode"] == 0 and w["wall_s"] > 0
    assert w["foreign_cpu_s"] >= 1.0  # the foreign loop, sampled while it ran
    # everything the machine did, minus the grandchild's 1.5 s, bounds what others did
    assert w["foreign_cpu_s"] <= system - 1.4 + 0.5
    assert w["foreign_cores"] == w["foreign_cpu_s"] / w["wall_s"]


def test_a_failing_command_returns_its_exit_code(tmp_path):
    w = run_watched([sys.executable, "-c", "import sys; print('x'); sys.exit(3)"], tmp_path / "log",
                    every_s=0.1)
    assert w["returncode"] == 3 and (tmp_path / "log").read_text() == "x\n"
