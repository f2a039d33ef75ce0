"""benchmarks/job_memory.py: the per-process peak of a process tree and each process's role. No
training run: a parent whose child touches 300 MiB."""

from __future__ import annotations

import subprocess
import sys
import time

from tests.scripts import load_benchmark

jm = load_benchmark("job_memory.py", "job_memory_under_test")

CHILD = "import time\nx = bytearray(300 * 2**20)\nprint('ready', flush=True)\ntime.sleep(1.5)\n"


def test_role_comes_from_the_title_or_an_ancestor():
    """No run: process titles as strings."""
    assert jm.role_of("ray::LearnerRank.update", []) == "learner"
    assert jm.role_of("ray::IDLE", []) == "ray"
    assert jm.role_of("VLLM::EngineCore", ["ray::RolloutWorker.rollout"]) == "engine"
    assert jm.role_of("/venv/bin/python /venv/bin/ragen2-train model=smollm2", []) == "driver"


def test_a_grandchilds_peak_is_measured_and_named_from_the_log():
    parent = subprocess.Popen([sys.executable, "-c",
                               f"import subprocess, sys; subprocess.run([sys.executable, '-c', {CHILD!r}])"])
    sampler = jm.TreeSampler(parent.pid)
    while parent.poll() is None:
        sampler.sample()
        time.sleep(0.1)
    assert parent.returncode == 0
    child = max(sampler.procs.values(), key=lambda r: r["peak_gib"])
    assert child["pid"] != parent.pid and parent.pid in child["parents"]
    # 300 MiB touched by bytearray's zero fill, plus an interpreter (~10-30 MiB)
    assert 0.29 < child["peak_gib"] < 0.40, child
    assert child["at_max_rss_gib"]["RssAnon"] > 0.28 and child["peak_private_gib"] > 0.28
    roles = {r["pid"]: r["role"] for r in sampler.by_role(f"(RolloutWorker pid={child['pid']}) hi")}
    assert roles[child["pid"]] == "engine" and roles[parent.pid] == "ray"
