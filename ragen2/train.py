"""``ragen2-train`` (also ``python -m ragen2.train``): the Hydra entry point.

Validates the whole config before any work starts, builds (or finds) the model, starts Ray and
hands over to the controller. The run directory is Hydra's output dir (``hydra.run.dir=...``).
"""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import re
import shutil
import sys
from pathlib import Path
from typing import Sequence

from omegaconf import OmegaConf

from ragen2.compose import (CONFIG_MODULE, check_override_keys, config_error, load_config,
                            normalize_overrides, register_schema, to_config)
from ragen2.config import Config, ConfigError

MIN_FREE_BYTES = 100 * 2**20  # a run directory with less free space is refused before training
DISK_ERRORS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM)
log = logging.getLogger("ragen2")
JOB_DIRNAME_MAX = 200  # characters; most file systems allow 255 bytes per folder name
_UNSAFE_IN_DIRNAME = re.compile(r"[^A-Za-z0-9._,=+@-]+")


def job_dirname(overrides: str) -> str:
    """A sweep job's overrides (Hydra's ``hydra.job.override_dirname``) as ONE folder name.

    Each run of characters other than ASCII letters, digits and ``. _ , = + @ -`` becomes one
    ``_`` (Hydra writes ``:`` as ``\\:``): a ``/`` in a value (``model.path=/shared/models/Qwen``)
    would nest folders, ``:`` is refused by some file systems, and quotes, spaces and brackets
    only get in the way of a shell. A name longer than :data:`JOB_DIRNAME_MAX` is cut and ends in
    a hash of the whole. The job number in front (``configs/config.yaml`` ``hydra.sweep.subdir``)
    keeps job folders distinct; the exact overrides stay in each job's ``.hydra/overrides.yaml``.
    """
    name = _UNSAFE_IN_DIRNAME.sub("_", overrides)
    if len(name) > JOB_DIRNAME_MAX:
        digest = hashlib.sha256(overrides.encode()).hexdigest()[:10]
        name = f"{name[:JOB_DIRNAME_MAX - len(digest) - 1]}-{digest}"
    return name


def register_resolvers() -> None:
    """``${ragen2.job_dirname:...}`` for ``configs/config.yaml``. Registered when this module is
    imported: Hydra resolves a sweep job's folder in the process that runs the job, which imports
    this module to unpickle the task (joblib, submitit) or already runs it (the basic launcher)."""
    if not OmegaConf.has_resolver("ragen2.job_dirname"):
        OmegaConf.register_new_resolver("ragen2.job_dirname", job_dirname)


register_resolvers()


class RunDirError(RuntimeError):
    """The run directory cannot be created or written, or its disk is (nearly) full."""


def check_run_dir(run_dir: str | Path, min_free: int = MIN_FREE_BYTES) -> None:
    """Create ``run_dir``, write + fsync + delete a probe file and require ``min_free`` bytes free."""
    path = Path(run_dir).absolute()
    probe = path / f".ragen2-write-probe-{os.getpid()}"
    try:
        path.mkdir(parents=True, exist_ok=True)
        with open(probe, "wb") as f:
            f.write(b"ragen2")
            f.flush()
            os.fsync(f.fileno())
    except OSError as e:
        raise RunDirError(f"run directory {path} is not writable: {e.strerror or e}; choose "
                          "another with hydra.run.dir=<dir>") from e
    finally:
        try:
            probe.unlink(missing_ok=True)
        except OSError:
            pass
    free = shutil.disk_usage(path).free
    if free < min_free:
        raise RunDirError(f"run directory {path} has only {free / 2**20:.1f} MiB free (at least "
                          f"{min_free / 2**20:.0f} MiB needed for logs and checkpoints): free "
                          "space or choose another with hydra.run.dir=<dir>")


def resolve_model_path(cfg: Config) -> str:
    """``model.path`` if given, else the built-in model ``model.name`` names, built once into the
    cache (:mod:`ragen2.builtin_models`: the tiny model, SmolLM2)."""
    if cfg.model.path:
        from ragen2.models.loading import load_tokenizer

        load_tokenizer(cfg.model.path, trust_remote_code=cfg.model.trust_remote_code)  # fail fast
        return cfg.model.path
    from ragen2.builtin_models import BUILT_IN

    return BUILT_IN.get(cfg.model.name)(cfg)


def ensure_ray(cfg: Config) -> None:
    import ray

    if ray.is_initialized():
        return
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    # Workers must import the user's env modules (env.id=<module>:<id>) and plugins exactly as the
    # driver does.
    from ragen2.plugins import plugin_paths

    path = os.pathsep.join(p for p in [os.getcwd(), *plugin_paths(cfg.plugins),
                                       os.environ.get("PYTHONPATH", "")] if p)
    from ragen2.cluster.jobs import ray_address
    from ragen2.cluster.placement import ACTOR_ENV

    env = {"PYTHONPATH": path, **(ACTOR_ENV if cfg.cluster.device == "cuda" else {})}
    # "local" unless cluster.address says otherwise: never another job's Ray on a shared node
    ray.init(address=ray_address(cfg), num_cpus=cfg.cluster.num_cpus, include_dashboard=False,
             log_to_driver=True, runtime_env={"env_vars": env})


def train(cfg: Config, run_dir: str | Path) -> dict:
    """Validate the run dir, env and model, then run training in ``run_dir`` (usable without Hydra)."""
    from ragen2.controller import run
    from ragen2.rollout.envs import all_entries, probe_env
    from ragen2.rollout.split import check_split
    from ragen2.runlog import run_log

    from ragen2.cluster import (check_hardware, check_hardware_on_cluster, cluster_nodes,
                                plan_placement)
    from ragen2.cluster.preflight import check_model_on_nodes

    check_run_dir(run_dir)  # before Ray or any model: a bad run dir fails in a second
    with run_log(run_dir):  # RUN_DIR/train.log and the console, as Hydra's job logging does
        for entry in all_entries(cfg.env):  # fail fast on a bad id, kwargs or observation type
            probe_env(entry)
        check_split(cfg.env, cfg.trainer.eval_episodes)  # both parts of each env's problems usable
        if cfg.cluster.address is None:
            check_hardware(cfg)  # a local Ray: every actor runs on this machine
        model_path = resolve_model_path(cfg)
        check_chat_template(cfg, model_path)  # before Ray: a template it cannot render fails fast
        ensure_ray(cfg)
        if cfg.cluster.device == "cuda":
            plan_placement(cfg, cluster_nodes())  # refuse a layout the cluster cannot hold, now
        if cfg.cluster.address is not None:
            check_hardware_on_cluster(cfg)  # the driver may sit on a CPU-only head node
        check_model_on_nodes(cfg, model_path)  # every node that loads the model can read it
        return run(cfg, Path(run_dir), model_path)


def check_chat_template(cfg: Config, model_path: str) -> None:
    """Refuse, before any actor starts, a chat template ragen2 cannot render turn by turn
    (:class:`ragen2.rollout.chat.ChatTemplateError` names what breaks)."""
    from ragen2.models.loading import load_tokenizer
    from ragen2.rollout.chat import ChatRenderer

    ChatRenderer(load_tokenizer(model_path, trust_remote_code=cfg.model.trust_remote_code))


def _fail(msg: str, code: int = 2) -> None:
    print(f"ragen2-train: error: {msg}", file=sys.stderr)
    sys.exit(code)


def _hydra_main(cfg) -> None:  # noqa: ANN001  (a DictConfig)
    from hydra.core.hydra_config import HydraConfig

    from ragen2.controller import EnvFailureError, TrainingStopped
    from ragen2.learner.checkpoint import CheckpointWriteError, latest
    from ragen2.models.smollm2 import MissingPackageError
    from ragen2.rollout.chat import ChatTemplateError
    from ragen2.rollout.envs import EnvSpecError
    from ragen2.cluster import HardwareError, PlacementError
    from ragen2.cluster.jobs import GpuSliceError, sweep_job_gpus
    from ragen2.preempt import PREEMPTED_EXIT, Preempted, install_early
    from ragen2.sync import WeightSyncError

    install_early()  # a SIGUSR1 while Ray and the models start stops the run before step 1
    try:
        typed = to_config(cfg)
    except ConfigError as e:
        _fail(str(e))
    logging.getLogger("ragen2").setLevel(logging.INFO)
    run_dir = HydraConfig.get().runtime.output_dir
    try:
        with sweep_job_gpus(typed):  # a joblib sweep job: its own CUDA_VISIBLE_DEVICES slice
            train(typed, run_dir)
    except (EnvSpecError, FileNotFoundError, HardwareError, PlacementError, RunDirError,
            ChatTemplateError, MissingPackageError, GpuSliceError) as e:
        _fail(str(e))
    except Preempted as e:  # SIGUSR1/SIGTERM: checkpointed at the end of a step
        print(f"ragen2-train: {e}", file=sys.stderr)
        if e.chain is not None:  # submitit's SIGUSR1 handler: requeue this job (it exits)
            e.chain(e.signum, None)
        sys.exit(PREEMPTED_EXIT)
    except (EnvFailureError, TrainingStopped, WeightSyncError, CheckpointWriteError) as e:
        _fail(str(e), code=1)  # stopped itself, with a reason
    except OSError as e:  # the disk filled up (or turned read-only) during the run
        cause = getattr(e, "cause", e)
        if getattr(cause, "errno", None) not in DISK_ERRORS:
            raise
        ckpt = latest(run_dir)
        _fail(f"writing into {run_dir} failed: {cause}; the run stopped. Latest checkpoint: "
              f"{ckpt.name if ckpt else 'none'} (free space, then rerun with trainer.resume=true)",
              code=1)
    except Exception as e:  # an env that stops the run (an env server that stays down)
        from ragen2.rollout.runner import stops_run

        cause = getattr(e, "cause", None) or e  # through Ray: the worker's exception
        if not stops_run(cause):
            raise
        _fail(f"{type(cause).__name__}: {cause}", code=1)


def check_command_line(argv: Sequence[str]) -> None:
    """Raise :class:`ConfigError` for any bad override before Hydra starts (Hydra would print its
    own message and exit 1): a single run composes and validates the whole config here, a sweep
    (``-m``) or a config from another directory only has its overrides parsed."""
    from hydra._internal.utils import get_args_parser
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    args = get_args_parser().parse_args(list(argv))
    if not (args.multirun or args.config_path or args.config_dir or args.help or args.hydra_help
            or args.info or args.shell_completion or args.experimental_rerun):
        load_config(args.overrides, config_name=args.config_name or "config")
        return
    check_override_keys(args.overrides)
    try:
        OverridesParser.create().parse_overrides(args.overrides)
    except HydraException as e:
        raise config_error(e, args.overrides) from e


def import_from_working_dir() -> None:
    """Put the working directory first on ``sys.path``, as ``python -m ragen2.train`` does.

    ``env.id=<module>:<id>`` names a module in the user's own folder. The ``ragen2-train``
    console script starts with the venv's ``bin/`` as ``sys.path[0]`` instead, so without this
    the env check would not find the module; :func:`ensure_ray` passes the same folder on to the
    Ray workers through ``PYTHONPATH``."""
    cwd = os.getcwd()
    if not sys.path or os.path.abspath(sys.path[0]) != cwd:  # abspath("") is the cwd
        sys.path.insert(0, cwd)


def main(argv: Sequence[str] | None = None) -> None:
    import hydra

    import_from_working_dir()
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        check_command_line(argv)
    except ConfigError as e:
        _fail(str(e))
    for a in argv:  # Hydra creates the run dir itself, with a traceback if it cannot
        if a.startswith("hydra.run.dir=") and "${" not in a:
            try:
                check_run_dir(a.split("=", 1)[1])
            except RunDirError as e:
                _fail(str(e))
    register_schema()
    sys.argv = [sys.argv[0], *normalize_overrides(argv)]
    hydra.main(config_path=f"pkg://{CONFIG_MODULE}", config_name="config", version_base="1.3")(_hydra_main)()


if __name__ == "__main__":
    main()
