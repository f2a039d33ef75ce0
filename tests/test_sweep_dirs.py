"""A sweep job's folder: one per job, whatever its override values hold (``ragen2.train.job_dirname``,
``hydra.sweep.subdir`` in configs/config.yaml). No training: the multirun below stops in its
first job, once the job's folder exists."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf, open_dict

from ragen2.train import JOB_DIRNAME_MAX, job_dirname

SAFE = re.compile(r"[A-Za-z0-9._,=+@-]+")
HOSTILE = ["model.path=/shared/models/Qwen2.5-3B-Instruct", "cluster.address=10.0.0.1:6379",
           "model.path=C:\\models\\qwen", "env.kwargs.name='a b'", "model.path=../..",
           "env.id=my_env:Corridor-v0,seed=1", "trainer.loggers=[jsonl,wandb]",
           "model.path=${oc.env:HOME}/m", "env.kwargs.word=café", "model.path=/", "x=*?<>|\"\n"]


@pytest.mark.parametrize("overrides", HOSTILE)
def test_job_dirname_is_one_safe_folder_name(overrides):
    name = job_dirname(overrides)
    assert SAFE.fullmatch(name), name
    assert name not in (".", "..") and len(name) <= JOB_DIRNAME_MAX


def test_job_dirname_keeps_plain_overrides_as_they_are():
    assert job_dirname("filter.value=0.5,seed=1") == "filter.value=0.5,seed=1"
    assert job_dirname("model.path=/shared/m:1") == "model.path=_shared_m_1"
    assert job_dirname("") == ""


def test_a_long_job_dirname_is_cut_and_ends_in_a_hash_of_the_whole():
    a, b = job_dirname("model.path=/" + "a" * 300), job_dirname("model.path=/" + "a" * 299 + "b")
    assert len(a) == len(b) == JOB_DIRNAME_MAX and a != b and a[:150] == b[:150]


def test_the_config_names_each_sweep_job_one_folder():
    from tests.test_presets import compose_with_hydra

    cfg = compose_with_hydra([])
    with open_dict(cfg):
        cfg.hydra.job.num = 3
        cfg.hydra.job.override_dirname = "model.path=/shared/models/Qwen:1,seed=0"
    assert OmegaConf.select(cfg, "hydra.sweep.subdir") == "3_model.path=_shared_models_Qwen_1,seed=0"


def test_a_multirun_over_a_path_lands_one_folder_per_job(tmp_path):
    """The README's sweep shape (``model.path=/shared/...`` in a multirun), typed: the job's folder
    sits right under the sweep folder. No run: the env module ends the process in job 0's env
    check, once Hydra has made the job's folder."""
    (tmp_path / "stop_on_import.py").write_text("import os\nos._exit(0)\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    r = subprocess.run([str(Path(sys.executable).parent / "ragen2-train"), "-m",
                        "env.id=stop_on_import:Stop-v0", "recipe=pretrained", "model.path=/shared/models/Qwen:1,/b",
                        f"hydra.sweep.dir={tmp_path / 'sweep'}"],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    jobs = [p.relative_to(tmp_path / "sweep").as_posix()
            for p in (tmp_path / "sweep").rglob(".hydra")]
    assert jobs == ["0_env.id=stop_on_import_Stop-v0,model.path=_shared_models_Qwen_1,recipe=pretrained/.hydra"]
