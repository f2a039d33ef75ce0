"""Checkpoints are atomic: a crash mid-write never leaves a checkpoint that resume would pick."""

from __future__ import annotations

import json

from ragen2.learner import checkpoint
from ragen2.metrics import JsonlSink


def _write(run_dir, step, payload=b"weights"):
    tmp = checkpoint.begin(run_dir, step)
    (tmp / "policy.pt").write_bytes(payload)
    return checkpoint.commit(tmp, step, {"step": step, "policy_version": step})


def test_latest_and_state(tmp_path):
    assert checkpoint.latest(tmp_path) is None
    _write(tmp_path, 2)
    final = _write(tmp_path, 4)
    assert checkpoint.latest(tmp_path) == final
    assert checkpoint.read_state(final) == {"step": 4, "policy_version": 4}
    assert json.loads((tmp_path / "checkpoints" / "latest.json").read_text())["step"] == 4


def test_crash_while_writing_keeps_the_previous_checkpoint(tmp_path):
    good = _write(tmp_path, 2)
    tmp = checkpoint.begin(tmp_path, 4)  # the process dies after writing half a checkpoint
    (tmp / "policy.pt").write_bytes(b"half")
    assert checkpoint.latest(tmp_path) == good
    # a pointer to a directory without its trainer state (renamed by hand, say) is not trusted
    (tmp_path / "checkpoints" / "latest.json").write_text(json.dumps({"step": 9, "dir": "step_000009"}))
    assert checkpoint.latest(tmp_path) == good


def test_prune_keeps_newest(tmp_path):
    for s in (1, 2, 3, 4):
        _write(tmp_path, s)
    checkpoint.begin(tmp_path, 5)
    checkpoint.prune(tmp_path, keep=2)
    names = sorted(p.name for p in (tmp_path / "checkpoints").iterdir() if p.is_dir())
    assert names == ["step_000003", "step_000004"]


def test_jsonl_resume_drops_rows_after_the_checkpoint(tmp_path):
    sink = JsonlSink(tmp_path, resume_step=-1)
    for s in range(5):
        sink.log(s, {"rollout/success": s / 10})
    sink.close()
    sink = JsonlSink(tmp_path, resume_step=2)  # resumed from the step-2 checkpoint
    sink.log(3, {"rollout/success": 0.9})
    sink.close()
    rows = [json.loads(l) for l in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 2, 3]
    assert rows[-1]["rollout/success"] == 0.9
