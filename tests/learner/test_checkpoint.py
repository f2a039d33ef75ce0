"""Checkpoints are atomic: a crash mid-write never leaves a checkpoint that resume would pick."""

from __future__ import annotations

import errno
import json
import os

import pytest

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


def test_a_sharded_checkpoint_commits_with_its_part_directories(tmp_path):
    """torch.distributed.checkpoint writes a directory per part (policy/, ref/: shards and
    .metadata); commit fsyncs the files inside and renames the whole tree into place."""
    tmp = checkpoint.begin(tmp_path, 3)
    for part in ("policy", "ref"):
        (tmp / part).mkdir()
        (tmp / part / ".metadata").write_bytes(b"meta")
        (tmp / part / "__0_0.distcp").write_bytes(b"shard")
    (tmp / "rng_rank0.pt").write_bytes(b"rng")
    final = checkpoint.commit(tmp, 3, {"step": 3, "policy_version": 3})
    assert checkpoint.latest(tmp_path) == final
    assert (final / "policy" / "__0_0.distcp").read_bytes() == b"shard"


def test_crash_while_writing_keeps_the_previous_checkpoint(tmp_path):
    good = _write(tmp_path, 2)
    tmp = checkpoint.begin(tmp_path, 4)  # the process dies after writing half a checkpoint
    (tmp / "policy.pt").write_bytes(b"half")
    assert checkpoint.latest(tmp_path) == good
    # a pointer to a directory without its trainer state (renamed by hand, say) is not trusted
    (tmp_path / "checkpoints" / "latest.json").write_text(json.dumps({"step": 9, "dir": "step_000009"}))
    assert checkpoint.latest(tmp_path) == good


def test_leftovers_of_a_crash_are_never_picked(tmp_path):
    good = _write(tmp_path, 2)
    root = tmp_path / "checkpoints"
    # died after the trainer state, before the rename: complete-looking, but a temporary name
    tmp = checkpoint.begin(tmp_path, 4)
    (tmp / "policy.pt").write_bytes(b"weights")
    checkpoint.write_json_atomic(tmp / checkpoint.STATE_FILE, {"step": 4, "policy_version": 4})
    # a directory with a cut-off trainer state, one renamed away while being replaced, a stray file
    (root / "step_000005").mkdir()
    (root / "step_000005" / checkpoint.STATE_FILE).write_text('{"step": 5, "poli')
    (root / "step_000006.tmp-old-1").mkdir()
    (root / "step_000006.tmp-old-1" / checkpoint.STATE_FILE).write_text("{}")
    (root / "latest.json.tmp-7").write_text('{"step": 9')
    assert checkpoint.latest(tmp_path) == good
    for pointer in ['{"step": 4, "di', "", "[]", '{"step": 4}', '{"dir": 4}', '{"dir": "../x"}',
                    json.dumps({"dir": tmp.name}), json.dumps({"dir": str(root / "step_000005")})]:
        (root / "latest.json").write_text(pointer)  # truncated, wrong, dangling: scan instead
        assert checkpoint.latest(tmp_path) == good, pointer
    (root / "latest.json").unlink()
    assert checkpoint.latest(tmp_path) == good
    assert checkpoint.read_state(checkpoint.latest(tmp_path))["step"] == 2


def test_scan_orders_by_step_number(tmp_path):
    _write(tmp_path, 999_999)
    newest = _write(tmp_path, 1_000_000)  # seven digits: newer although it sorts first as text
    (tmp_path / "checkpoints" / "latest.json").unlink()
    assert checkpoint.latest(tmp_path) == newest


def test_rewriting_a_step_replaces_it_whole(tmp_path):
    _write(tmp_path, 2, b"old")
    final = _write(tmp_path, 2, b"new")  # a resumed run writes the same step again
    assert (final / "policy.pt").read_bytes() == b"new"
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["latest.json", "step_000002"]


def test_failed_writes_leave_the_previous_checkpoint(tmp_path, monkeypatch):
    good = _write(tmp_path, 2)
    root = tmp_path / "checkpoints"
    pointer = (root / "latest.json").read_text()

    def no_space(*a, **k):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(checkpoint.os, "fsync", no_space)  # every fsync of the new step fails
    tmp = checkpoint.begin(tmp_path, 4)
    (tmp / "policy.pt").write_bytes(b"weights")
    with pytest.raises(OSError, match="No space left"):
        checkpoint.commit(tmp, 4, {"step": 4, "policy_version": 4})
    monkeypatch.undo()
    assert not list(tmp.glob("*.tmp-*"))  # write_json_atomic removed its temporary file
    checkpoint.discard(tmp)
    assert sorted(p.name for p in root.iterdir()) == ["latest.json", "step_000002"]
    assert (root / "latest.json").read_text() == pointer and checkpoint.latest(tmp_path) == good


def test_an_interrupted_prune_leaves_nothing_resume_would_take(tmp_path, monkeypatch):
    for s in (1, 2, 3):
        _write(tmp_path, s)
    monkeypatch.setattr(checkpoint.shutil, "rmtree", lambda *a, **k: None)  # dies mid-deletion
    checkpoint.prune(tmp_path, keep=2)
    monkeypatch.undo()
    root = tmp_path / "checkpoints"
    assert (root / "step_000001").exists()
    assert not (root / "step_000001" / checkpoint.STATE_FILE).exists()  # gone first
    (root / "step_000003" / checkpoint.STATE_FILE).unlink()  # and the newest is damaged too
    (root / "latest.json").write_text("{")
    assert checkpoint.latest(tmp_path) == root / "step_000002"
    (root / "step_000002" / checkpoint.STATE_FILE).unlink()
    assert checkpoint.latest(tmp_path) is None


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


def test_jsonl_resume_survives_a_row_torn_by_a_kill(tmp_path):
    sink = JsonlSink(tmp_path, resume_step=-1)
    for s in range(3):
        sink.log(s, {"rollout/success": s / 10})
    sink.close()
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write('{"rollout/success": 0.3, "st')  # the process died mid-write
    JsonlSink(tmp_path, resume_step=1).close()
    rows = [json.loads(l) for l in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1]
