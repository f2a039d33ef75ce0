"""The model must be loadable on every Ray node (a Ray task per node; one local node here)."""

from __future__ import annotations

import pytest

from ragen2.cluster.preflight import HardwareError, check_model_on_nodes, looks_local, model_problem
from ragen2.config import Config


def test_paths_and_hub_names():
    assert looks_local("/models/qwen") and looks_local("./qwen") and looks_local("~/m")
    assert looks_local("a/b/c")
    assert not looks_local("Qwen/Qwen2.5-3B-Instruct") and not looks_local("gpt2")


def test_model_problem_for_directories(tmp_path):
    assert model_problem(str(tmp_path / "nowhere")) == f"no directory {tmp_path / 'nowhere'}"
    assert "no config.json" in model_problem(str(tmp_path))
    (tmp_path / "config.json").write_text("{}")
    assert model_problem(str(tmp_path)) is None


def test_hub_name_offline_and_not_cached(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    name = "ragen2-test/not-a-model"
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    assert model_problem(name) is None  # online: it is downloaded where it is missing
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert "HF_HUB_OFFLINE=1" in model_problem(name) and str(tmp_path) in model_problem(name)


def test_a_missing_path_is_refused_naming_the_node_and_the_path(ray_session, tmp_path):
    missing = tmp_path / "models" / "qwen"
    with pytest.raises(HardwareError) as e:
        check_model_on_nodes(Config(), str(missing))
    msg = str(e.value)
    node = ray_session.nodes()[0]["NodeManagerAddress"]
    assert f"({missing})" in msg and f"no directory {missing}" in msg and node in msg
    assert "cannot be loaded on 1 of 1 Ray nodes" in msg and "hf download" in msg


def test_a_present_model_passes(ray_session, tmp_path):
    (tmp_path / "config.json").write_text("{}")
    check_model_on_nodes(Config(), str(tmp_path))


def test_relative_paths_are_checked_as_the_driver_sees_them(ray_session, tmp_path, monkeypatch):
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{}")
    monkeypatch.chdir(tmp_path)
    check_model_on_nodes(Config(), "./m")  # Ray workers run elsewhere: checked as tmp_path/m
