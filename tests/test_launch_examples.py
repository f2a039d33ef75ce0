"""The GPU examples of the docs and launch files, composed; the SLURM sweep launcher's config.

Every command line that launches ragen2 on GPUs (the docs' GPU how-to pages, launch/README.md,
the sbatch header, the Dockerfile, the RayJob) is parsed out of its file and composed with Hydra: it
must start from a paper preset, fit the GPUs it names and pass the memory estimate.
"""

from __future__ import annotations

import os
import re
import signal

import pytest
import yaml

from tests.test_launch_files import LAUNCH, ROOT, dockerfile, extra, rayjob, sbatch_text


# -------------------------------------------------------------------------- sweeps on SLURM
# hydra-submitit-launcher 1.2.0's SlurmQueueConf (hydra_plugins/hydra_submitit_launcher/config.py)
SLURM_QUEUE_KEYS = {
    "submitit_folder", "timeout_min", "cpus_per_task", "gpus_per_node", "tasks_per_node", "mem_gb",
    "nodes", "name", "stderr_to_stdout", "_target_", "partition", "qos", "comment", "constraint",
    "exclude", "gres", "cpus_per_gpu", "gpus_per_task", "mem_per_gpu", "mem_per_cpu", "account",
    "signal_delay_s", "max_num_timeout", "additional_parameters", "array_parallelism", "setup"}
LAUNCHER = ROOT / "configs" / "hydra" / "launcher" / "ragen2_slurm.yaml"


def test_submitit_launcher_config_shape():
    text = LAUNCHER.read_text()
    assert text.startswith("# @package hydra.launcher\n")
    conf = yaml.safe_load(text)
    assert conf["defaults"] == ["submitit_slurm", "_self_"]
    assert set(conf) - {"defaults"} <= SLURM_QUEUE_KEYS, set(conf) - SLURM_QUEUE_KEYS
    assert conf["signal_delay_s"] >= 120 and conf["max_num_timeout"] >= 1
    assert conf["gpus_per_node"] == "${cluster.learner_world_size}"
    assert any("HF_HUB_OFFLINE=1" in line for line in conf["setup"])
    assert "hydra-submitit-launcher" in extra("sweep-slurm")
    # the test extra holds the same pin, so the composition test below runs in CI
    assert extra("test")["hydra-submitit-launcher"] == extra("sweep-slurm")["hydra-submitit-launcher"]


def test_submitit_launcher_composes_into_an_sbatch_script(tmp_path, monkeypatch):
    """No run: the sbatch file is only written. Compose hydra/launcher=ragen2_slurm on a preset, then let submitit write the sbatch file
    exactly as the plugin's launch() builds its executor (no SLURM needed: a stand-in srun)."""
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    submitit = pytest.importorskip("submitit")
    (tmp_path / "srun").write_text("#!/bin/sh\nexit 0\n")
    (tmp_path / "srun").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    from hydra import compose, initialize_config_module
    from omegaconf import OmegaConf

    from ragen2.compose import register_schema

    register_schema()
    with initialize_config_module(config_module="ragen2_configs", version_base="1.3"):
        cfg = compose(config_name="config", return_hydra_config=True, overrides=[
            "hydra/launcher=ragen2_slurm", "+experiment=ragen2_sokoban_0.5b",
            "hydra.launcher.partition=gpu", "hydra.launcher.account=proj",
            f"hydra.sweep.dir={tmp_path}"])
        params = OmegaConf.to_container(cfg.hydra.launcher, resolve=True)
    assert params["_target_"].endswith("submitit_launcher.SlurmLauncher")
    assert params["gpus_per_node"] == 1  # the 0.5B preset's cluster=gpu_1
    base = {"submitit_folder", "timeout_min", "cpus_per_task", "gpus_per_node", "tasks_per_node",
            "mem_gb", "nodes", "name", "stderr_to_stdout"}
    executor = submitit.AutoExecutor(folder=params.pop("submitit_folder"), cluster="slurm",
                                     slurm_max_num_timeout=params.pop("max_num_timeout"))
    params.pop("_target_")
    executor.update_parameters(**{k if k in base else f"slurm_{k}": v for k, v in params.items()})
    text = executor._executor._make_submission_file_text("python -u -m ragen2.train", "uid")
    from ragen2.preempt import stop_signals

    # submitit's warning signal (USR2 by default) is one ragen2 stops on inside a submitit job
    sig = re.search(r"#SBATCH --signal=(\w+)@300", text)[1]
    monkeypatch.setenv("SUBMITIT_EXECUTOR", "slurm")
    assert getattr(signal, f"SIG{sig}") in stop_signals()
    for line in ("#SBATCH --gpus-per-node=1", "#SBATCH --time=1440",
                 "#SBATCH --partition=gpu", "#SBATCH --account=proj",
                 "export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1"):
        assert line in text, text


# ---------------------------------------------------------------- the GPU examples, composed
PAPER_PRESETS = {p.stem for p in (ROOT / "configs" / "experiment").glob("ragen2_*.yaml")} - {
    "ragen2_sweep"}


def _bash_blocks(markdown: str) -> list[str]:
    """Command lines of the ```bash blocks, continuation lines joined."""
    out = []
    for block in re.findall(r"```bash\n(.*?)```", markdown, re.S):
        out += block.replace("\\\n", " ").splitlines()
    return out


def _comment_command(text: str, start: str) -> str:
    """A command quoted in a file's comments: the line holding ``start`` and its continuations."""
    lines = [ln.lstrip("#").strip() for ln in text.splitlines() if ln.startswith("#")]
    i = next(i for i, ln in enumerate(lines) if start in ln)
    cmd = lines[i]
    while cmd.endswith("\\"):
        i += 1
        cmd = cmd[:-1] + " " + lines[i]
    return cmd


#: the documentation pages whose commands launch ragen2 on GPUs
GPU_PAGES = ("gpu-cluster.md", "slurm.md", "containers.md")


def gpu_examples() -> list[tuple[str, str]]:
    """(where, command line) of every GPU example ragen2's docs and launch files give."""
    out = [(f"docs/how-to/{page}", c) for page in GPU_PAGES
           for c in _bash_blocks((ROOT / "docs" / "how-to" / page).read_text())]
    out += [("launch/README.md", c) for c in _bash_blocks((LAUNCH / "README.md").read_text())]
    out.append(("ragen2.sbatch", _comment_command(sbatch_text(), "sbatch ")))
    out.append(("Dockerfile", _comment_command(dockerfile(), "docker run ")))
    out.append(("rayjob.yaml", rayjob()["spec"]["entrypoint"]))
    return [(w, c) for w, c in out if re.search(r"(^|\s)ragen2(-| )train(\s|$)", c)
            or "ragen2.sbatch " in c]


def _overrides(cmd: str) -> tuple[list[str], dict[str, str]]:
    """The ragen2-train overrides of a command line (the first value of a swept key), and the
    sbatch options before the script."""
    import shlex

    words = shlex.split(cmd, comments=True)
    for i in range(len(words) - 1):  # `ragen2 train` is the console script `ragen2-train`
        if words[i].endswith("ragen2") and words[i + 1] == "train":
            words[i:i + 2] = ["ragen2-train"]
            break
    i = next(i for i, w in enumerate(words) if w == "ragen2-train" or w.endswith("ragen2.sbatch"))
    sbatch = dict(w[2:].split("=", 1) for w in words[:i] if w.startswith("--") and "=" in w)
    out = []
    for w in words[i + 1:]:
        if w == "-m" or w.startswith(("hydra.", "hydra/")):
            continue  # multirun flag, launcher and run-dir settings: not the job's config
        key, _, value = w.partition("=")
        if "," in value and not value.startswith("["):
            value = value.split(",")[0]  # a swept key: compose its first job
        out.append(f"{key}={value}")
    return out, sbatch


def test_every_gpu_example_is_found():
    """No run: the examples are only read."""
    where = [w for w, _ in gpu_examples()]
    docs = [w for w in where if w.startswith("docs/")]
    assert len(docs) >= 8 and where.count("launch/README.md") >= 4, where
    assert {f"docs/how-to/{p}" for p in ("gpu-cluster.md", "slurm.md")} <= set(docs), where
    assert {"ragen2.sbatch", "Dockerfile", "rayjob.yaml"} <= set(where)


@pytest.mark.parametrize("where,cmd", gpu_examples(), ids=lambda x: x[:60] if isinstance(x, str)
                         else x)
def test_gpu_example_starts_from_a_paper_preset_and_fits(where, cmd):
    """No run: each example is composed and planned, not run."""
    from ragen2.cluster.memory import H100_80GB, estimate_memory
    from ragen2.cluster.placement import NodeResources, plan_placement
    from ragen2.train import load_config

    overrides, sbatch = _overrides(cmd)
    experiments = [o.split("=", 1)[1].strip("[]").split(",") for o in overrides
                   if o.startswith("+experiment=")]
    assert experiments and experiments[0][0] in PAPER_PRESETS, (
        f"{where}: a GPU example must start from a paper preset (+experiment=ragen2_<env>): {cmd}")
    if where in ("ragen2.sbatch", "Dockerfile", "rayjob.yaml") or "cluster.address" in cmd \
            or "ragen2.sbatch" in cmd:
        path = next((o.split("=", 1)[1] for o in overrides if o.startswith("model.path=")), "")
        assert path.startswith("/"), f"{where}: a cluster example reads a pre-downloaded model: {cmd}"
    if "ragen2.sbatch" in cmd:  # what the script adds in front of the user's overrides
        overrides = ["cluster.address=10.0.0.1:6379", "cluster.device=cuda",
                     "cluster.backend=nccl", "trainer.resume=true", *overrides]
    cfg = load_config(overrides)
    assert cfg.cluster.device == "cuda" and cfg.model.dtype == "bfloat16"
    if where == "rayjob.yaml":
        groups = rayjob()["spec"]["rayClusterSpec"]["workerGroupSpecs"]
        shape = [int(g["rayStartParams"]["num-gpus"]) for g in groups for _ in range(g["replicas"])]
    elif "nodes" in sbatch:
        shape = [int(sbatch["gpus-per-node"])] * int(sbatch["nodes"])
    else:  # as many 8-GPU nodes as the example asks for
        need = cfg.cluster.learner_world_size + (
            cfg.rollout.num_workers * cfg.engine.tensor_parallel_size
            if cfg.cluster.layout == "split" else 0)
        shape = [8] * -(-need // 8)
    nodes = [NodeResources(f"{i:02d}" * 8, 64, g, f"10.0.0.{i + 1}") for i, g in enumerate(shape)]
    plan_placement(cfg, nodes)  # raises if the layout does not fit the GPUs the example names
    budget = estimate_memory(cfg, H100_80GB)
    assert budget is not None and budget.fits, f"{where}: {cmd}\n{budget.describe()}"
