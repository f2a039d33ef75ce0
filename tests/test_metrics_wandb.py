"""ragen2.metrics.WandbSink in W&B's offline mode: one W&B run per ragen2 run, kept on resume,
the jobs of a multirun grouped by their sweep folder. Nothing leaves the machine."""

from __future__ import annotations

import pytest
from omegaconf import open_dict

from ragen2.metrics import MetricsLogger

wandb = pytest.importorskip("wandb", reason="wandb is not installed (pip install 'ragen2[wandb]')")


@pytest.fixture(autouse=True)
def offline(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    for var in ("WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR"):  # not the user's ~
        monkeypatch.setenv(var, str(tmp_path / "wandb_home" / var))


def _run(run_dir, resume_step=-1) -> tuple[str, str | None]:
    """One logged step through the sink, as ``controller.run`` drives it: the W&B (id, group)."""
    logger = MetricsLogger(["wandb"], run_dir, resume_step=resume_step, project="ragen2-test",
                           config={"seed": 0})
    logger.log(1, {"rollout/success": 0.5})
    run = logger.sinks[0].run
    ids = run.id, run.group or None
    logger.close()
    return ids


def test_each_run_has_its_own_wandb_run_and_a_resume_continues_it(tmp_path):
    a, b = tmp_path / "sweep_a" / "0_seed=0", tmp_path / "sweep_b" / "0_seed=0"  # same names
    id_a, id_b = _run(a)[0], _run(b)[0]
    assert id_a != id_b
    assert (a / "wandb_run_id").read_text().strip() == id_a
    assert list((a / "wandb").glob(f"offline-run-*-{id_a}"))  # W&B's files in the run dir
    assert _run(a, resume_step=1)[0] == id_a  # trainer.resume=true: the same W&B run
    assert _run(a, resume_step=-1)[0] not in (id_a, id_b)  # a fresh start there: a new one


def test_a_resumed_run_begun_without_wandb_gets_an_id_it_keeps(tmp_path):
    first = _run(tmp_path / "run", resume_step=3)[0]
    assert _run(tmp_path / "run", resume_step=5)[0] == first


def test_the_jobs_of_a_multirun_share_their_sweep_folder_as_group(tmp_path):
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from tests.test_presets import compose_with_hydra

    assert _run(tmp_path / "single")[1] is None  # no Hydra multirun: no group
    cfg = compose_with_hydra([])
    with open_dict(cfg):
        cfg.hydra.mode = RunMode.MULTIRUN
        cfg.hydra.sweep.dir = str(tmp_path / "multirun")
    HydraConfig.instance().set_config(cfg)
    try:
        groups = {_run(tmp_path / "multirun" / f"{n}_seed={n}")[1] for n in (0, 1)}
    finally:
        HydraConfig.instance().cfg = None
    assert groups == {str(tmp_path / "multirun")[-128:]}
