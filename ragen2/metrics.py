"""Metric sinks: one JSON object per step in ``metrics.jsonl``, TensorBoard, W&B (:class:`WandbSink`),
console.

Keys are namespaced (``rollout/…``, ``actor/…``, ``eval/…``, ``timing/…``). On resume, rows
after the checkpoint's step are dropped from ``metrics.jsonl`` and purged from TensorBoard, so a
resumed run's logs read as if it had never stopped.
"""

from __future__ import annotations

import json
import math
import uuid
from pathlib import Path
from typing import Any, Mapping, Protocol

from ragen2.atomic import write_text
from ragen2.registry import Registry


class MetricSink(Protocol):
    def log(self, step: int, metrics: Mapping[str, float]) -> None: ...

    def close(self) -> None: ...


SINKS: Registry = Registry("metrics sink")


def _clean(metrics: Mapping[str, Any]) -> dict[str, Any]:
    out = {}
    for k, v in metrics.items():
        v = float(v) if not isinstance(v, (str, bool)) else v
        out[k] = None if isinstance(v, float) and not math.isfinite(v) else v
    return out


def _row(line: str) -> dict | None:
    """One metrics row, or None for a blank line or one torn by a kill mid-write."""
    try:
        row = json.loads(line)
    except ValueError:
        return None
    return row if isinstance(row, dict) else None


@SINKS.register("jsonl")
class JsonlSink:
    def __init__(self, run_dir: Path, resume_step: int | None = None, **_: Any) -> None:
        self.path = Path(run_dir) / "metrics.jsonl"
        if resume_step is not None and self.path.exists():
            keep = [ln for ln in self.path.read_text().splitlines()
                    if (row := _row(ln)) is not None and row.get("step", 0) <= resume_step]
            write_text(self.path, "".join(ln + "\n" for ln in keep))
        self.f = open(self.path, "a")

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        self.f.write(json.dumps({"step": step, **_clean(metrics)}, sort_keys=True) + "\n")
        self.f.flush()

    def close(self) -> None:
        self.f.close()


#: TensorBoard's "Custom Scalars" tab: each fixed-panel estimate with its 95% bootstrap interval
#: as one band ("Margin": value, lower, upper), and the estimates beside their floors or chance
#: ("Multiline"). A chart whose tags the run never logs is simply empty.
CUSTOM_SCALARS: dict[str, dict[str, list]] = {
    "collapse (fixed panel, 95% bootstrap band)": {
        "panel MI (nats)": ["Margin", ["collapse/panel/mi", "collapse/panel/mi_lo",
                                       "collapse/panel/mi_hi"]],
        "panel retrieval@1": ["Margin", ["collapse/panel/retrieval_acc@1",
                                         "collapse/panel/retrieval_acc@1_lo",
                                         "collapse/panel/retrieval_acc@1_hi"]],
        "panel H(Z|X) (nats)": ["Margin", ["collapse/panel/h_cond", "collapse/panel/h_cond_lo",
                                           "collapse/panel/h_cond_hi"]],
    },
    "collapse (against their floors)": {
        "MI and permutation floors": ["Multiline", ["collapse/mi", "collapse/mi_null",
                                                    "collapse/panel/mi",
                                                    "collapse/panel/mi_floor"]],
        "retrieval@1 and chance": ["Multiline", ["collapse/retrieval_acc@1",
                                                 "collapse/retrieval_chance@1"]],
        "action MI": ["Multiline", ["collapse/action/mi", "collapse/action/mi_null"]],
    },
    "success": {"train and held-out": ["Multiline", ["rollout/success", "eval/success"]]},
}


@SINKS.register("tensorboard")
class TensorBoardSink:
    def __init__(self, run_dir: Path, resume_step: int | None = None, **_: Any) -> None:
        from torch.utils.tensorboard import SummaryWriter

        purge = resume_step + 1 if resume_step is not None else None
        self.writer = SummaryWriter(str(Path(run_dir) / "tensorboard"), purge_step=purge)
        self.writer.add_custom_scalars(CUSTOM_SCALARS)  # metadata only; again on resume is harmless

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        for k, v in metrics.items():
            if isinstance(v, (int, float)) and math.isfinite(float(v)):
                self.writer.add_scalar(k, float(v), step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


WANDB_ID_FILE = "wandb_run_id"
WANDB_GROUP_MAX = 128  # characters W&B accepts in a group name


def hydra_sweep_dir() -> str | None:
    """The sweep folder (``hydra.sweep.dir``) when this process runs a job of a Hydra multirun."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if not HydraConfig.initialized() or HydraConfig.get().mode != RunMode.MULTIRUN:
        return None
    return str(HydraConfig.get().sweep.dir)


def wandb_run_id(run_dir: Path, resuming: bool) -> str:
    """This run's W&B id: drawn at a fresh start and kept in ``RUN_DIR/wandb_run_id``, read back
    when the run resumes (a resumed run with no such file, begun without W&B, gets a new one)."""
    path = Path(run_dir) / WANDB_ID_FILE
    if resuming and path.is_file() and (run_id := path.read_text().strip()):
        return run_id
    run_id = uuid.uuid4().hex
    write_text(path, run_id + "\n")
    return run_id


@SINKS.register("wandb")
class WandbSink:
    """Weights & Biases: ``trainer.loggers=[jsonl,tensorboard,console,wandb]`` with
    ``pip install 'ragen2[wandb]'``, into project ``trainer.wandb_project`` (default ``ragen2``).

    One W&B run per ragen2 run, named after its run folder. Its id is drawn at a fresh start and
    kept in ``RUN_DIR/wandb_run_id``, so ``trainer.resume=true`` continues that W&B run and never
    another one: run folders repeat across sweeps (``0_filter.value=0.5``, ``HH-MM-SS``), so the
    folder name is no id. The jobs of one Hydra multirun share a W&B group, their sweep folder.
    W&B's own files go to ``RUN_DIR/wandb``; with ``WANDB_MODE=offline`` (a cluster without
    internet) they stay there until ``wandb sync RUN_DIR/wandb/offline-run-*``. Unlike
    ``metrics.jsonl``, W&B keeps what a killed run logged after its last checkpoint, and drops
    the resumed run's rows for those steps (it refuses a step below one it has seen).
    """

    def __init__(self, run_dir: Path, project: str | None = None, config: Any = None,
                 resume_step: int | None = None, **_: Any) -> None:
        try:
            import wandb
        except ImportError as e:
            raise ImportError("trainer.loggers has 'wandb' but wandb is not installed: "
                              "pip install 'ragen2[wandb]'") from e
        resuming = resume_step is not None and resume_step >= 0  # MetricsLogger: -1 = fresh
        group = hydra_sweep_dir()
        self.run = wandb.init(project=project or "ragen2", dir=str(run_dir), config=config,
                              id=wandb_run_id(run_dir, resuming), name=Path(run_dir).name,
                              group=group[-WANDB_GROUP_MAX:] if group else None, resume="allow")

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        self.run.log(dict(metrics), step=step)

    def close(self) -> None:
        self.run.finish()


CONSOLE_KEYS = (("rollout/success", "succ"), ("rollout/reward_mean", "rew"),
                ("actor/loss", "loss"), ("actor/logprob_gap", "gap"), ("eval/success", "eval"),
                ("timing/step_s", "s/step"))


@SINKS.register("console")
class ConsoleSink:
    """A tqdm progress bar over RL steps whose postfix shows the key figures."""

    def __init__(self, run_dir: Path, total_steps: int = 0, start_step: int = 0, **_: Any) -> None:
        from tqdm.auto import tqdm

        self.bar = tqdm(total=total_steps, initial=start_step, desc="RL", unit="step",
                        dynamic_ncols=True)
        self.last: dict[str, str] = {}

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        for key, short in CONSOLE_KEYS:
            if key in metrics and isinstance(metrics[key], (int, float)):
                self.last[short] = f"{float(metrics[key]):.3g}"
        self.bar.set_postfix(self.last, refresh=False)
        if step > self.bar.n:
            self.bar.update(step - self.bar.n)

    def close(self) -> None:
        self.bar.close()


class MetricsLogger:
    """Fans one row of metrics out to every configured sink."""

    def __init__(self, names: list[str], run_dir: Path, **kwargs: Any) -> None:
        Path(run_dir).mkdir(parents=True, exist_ok=True)
        self.sinks = [SINKS.get(n)(Path(run_dir), **kwargs) for n in names]

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        for s in self.sinks:
            s.log(step, metrics)

    def close(self) -> None:
        for s in self.sinks:
            s.close()
