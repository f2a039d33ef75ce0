"""ragen2.atomic: a write lands whole or not at all, and never leaves its temporary file behind."""

from __future__ import annotations

import gzip
import json

import pytest

from ragen2.atomic import atomic_write, tmp_path as atomic_tmp, write_json, write_text


def test_text_write_lands_and_leaves_no_temporary_file(tmp_path):
    path = tmp_path / "out.txt"
    with atomic_write(path, "w") as f:
        assert not path.exists()  # nothing at the target until the write completes
        assert atomic_tmp(path).exists()
        f.write("héllo\n")
    assert path.read_text(encoding="utf-8") == "héllo\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]


def test_binary_and_json_and_text_helpers(tmp_path):
    with atomic_write(tmp_path / "b.bin", "wb") as f:
        f.write(b"\x00\x01")
    assert (tmp_path / "b.bin").read_bytes() == b"\x00\x01"
    write_text(tmp_path / "t.txt", "x\n", fsync=False)
    assert (tmp_path / "t.txt").read_text() == "x\n"
    write_json(tmp_path / "j.json", {"b": 1, "a": [1.5]})
    assert (tmp_path / "j.json").read_text() == json.dumps({"a": [1.5], "b": 1}, indent=1,
                                                           sort_keys=True)


def test_gzip_write_reads_back(tmp_path):
    path = tmp_path / "rows.jsonl.gz"
    rows = [{"i": i, "s": "é" * i} for i in range(50)]
    with atomic_write(path, "w", compress=True) as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    with gzip.open(path, "rt", encoding="utf-8") as f:
        assert [json.loads(ln) for ln in f] == rows
    with atomic_write(tmp_path / "b.gz", "wb", compress=True) as f:
        f.write(b"abc" * 100)
    assert gzip.decompress((tmp_path / "b.gz").read_bytes()) == b"abc" * 100
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]


@pytest.mark.parametrize("compress", [False, True])
def test_failure_mid_write_keeps_the_old_file_and_removes_the_temporary(tmp_path, compress):
    path = tmp_path / "state.json"
    with atomic_write(path, "w", compress=compress) as f:
        f.write("old\n")
    old = path.read_bytes()
    with pytest.raises(RuntimeError, match="disk full"):
        with atomic_write(path, "w", compress=compress) as f:
            f.write("new, half written")
            f.flush()
            raise RuntimeError("disk full")
    assert path.read_bytes() == old
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json"]


def test_failure_on_a_fresh_path_leaves_nothing(tmp_path):
    with pytest.raises(TypeError):
        write_json(tmp_path / "x.json", {"bad": object()})
    assert list(tmp_path.iterdir()) == []


def test_bad_mode_is_refused(tmp_path):
    with pytest.raises(ValueError, match="mode"):
        with atomic_write(tmp_path / "x", "a"):
            pass
