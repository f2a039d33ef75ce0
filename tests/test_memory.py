"""``ragen2 memory`` (ragen2/memory.py): the memory estimate of a config, before any GPU is reserved
(the estimate itself: tests/cluster/test_memory.py, tests/cluster/test_host_memory.py)."""

from __future__ import annotations

from ragen2.memory import main


def test_command_line_says_before_any_gpu_is_reserved(capsys):
    assert main(["+experiment=ragen2_sokoban", "cluster=gpu_1"]) == 1
    out = capsys.readouterr().out
    assert "does not fit: the learner needs 113.6 GiB per GPU and has 43.8 GiB" in out
    assert "learner.cpu_offload=true" in out
    assert main(["+experiment=ragen2_sokoban"]) == 0
    assert capsys.readouterr().out.rstrip().endswith("fits")
    assert main(["--gpu-gib", "39.6", "+experiment=ragen2_sokoban_0.5b"]) == 1  # A100-40GB
    assert main(["--host-gib", "64"]) == 0  # the CPU default: its host-memory budget
    assert "learner rank(s)" in capsys.readouterr().out
    assert main(["--host-gib", "4", "model=smollm2"]) == 1
    assert "fix: cluster.learner_world_size=1" in capsys.readouterr().out
