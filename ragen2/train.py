"""``ragen2-train`` (also ``python -m ragen2.train``): the Hydra entry point.

Validates the whole config before any work starts, builds (or finds) the model, starts Ray and
hands over to the controller. The run directory is Hydra's output dir (``hydra.run.dir=...``).
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Sequence

from ragen2.config import (Config, ConfigError, check_override_keys, normalize_overrides,
                           register_schema, to_config)

CONFIG_MODULE = "ragen2_configs"
log = logging.getLogger("ragen2")


def load_config(overrides: Sequence[str] = ()) -> Config:
    """Compose ``configs/config.yaml`` with overrides and validate it (for tests and notebooks)."""
    from hydra import compose, initialize_config_module

    check_override_keys(list(overrides))
    register_schema()
    with initialize_config_module(config_module=CONFIG_MODULE, version_base="1.3"):
        return to_config(compose(config_name="config", overrides=normalize_overrides(list(overrides))))


def resolve_model_path(cfg: Config) -> str:
    """``model.path`` if given, else the cached tiny model built from the env's own text."""
    if cfg.model.path:
        from ragen2.models.loading import load_tokenizer

        load_tokenizer(cfg.model.path, trust_remote_code=cfg.model.trust_remote_code)  # fail fast
        return cfg.model.path
    from ragen2.models.tiny import ensure_tiny_model
    from ragen2.rollout.corpus import env_action_words, env_corpus
    from ragen2.rollout.envs import all_entries

    entries = all_entries(cfg.env)  # training and evaluation envs: one vocabulary for all
    words = tuple(dict.fromkeys(w for e in entries for w in env_action_words(e.id, e.kwargs)))
    spec = cfg.model.tiny.to_spec(words)
    path = ensure_tiny_model(spec, lambda: [t for e in entries for t in env_corpus(e.id, e.kwargs)],
                             cfg.model.cache_dir)
    return str(path)


def ensure_ray(cfg: Config) -> None:
    import ray

    if ray.is_initialized():
        return
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    # Workers must import the user's env modules (env.id=<module>:<id>) exactly as the driver does.
    path = os.pathsep.join(p for p in [os.getcwd(), os.environ.get("PYTHONPATH", "")] if p)
    ray.init(address=cfg.cluster.address, num_cpus=cfg.cluster.num_cpus, include_dashboard=False,
             log_to_driver=True, runtime_env={"env_vars": {"PYTHONPATH": path}})


def train(cfg: Config, run_dir: str | Path) -> dict:
    """Validate the env and model, then run training in ``run_dir`` (usable without Hydra)."""
    from ragen2.controller import run
    from ragen2.rollout.envs import all_entries, probe_env

    from ragen2.cluster import (check_hardware, check_hardware_on_cluster, cluster_nodes,
                                plan_placement)

    for entry in all_entries(cfg.env):  # fail fast on a bad id, kwargs or observation type
        probe_env(entry)
    if cfg.cluster.address is None:
        check_hardware(cfg)  # a local Ray: every actor runs on this machine
    ensure_ray(cfg)
    if cfg.cluster.device == "cuda":
        plan_placement(cfg, cluster_nodes())  # refuse a layout the cluster cannot hold, now
    if cfg.cluster.address is not None:
        check_hardware_on_cluster(cfg)  # the driver may sit on a CPU-only head node
    model_path = resolve_model_path(cfg)
    return run(cfg, Path(run_dir), model_path)


def _fail(msg: str, code: int = 2) -> None:
    print(f"ragen2-train: error: {msg}", file=sys.stderr)
    sys.exit(code)


def _hydra_main(cfg) -> None:  # noqa: ANN001  (a DictConfig)
    from hydra.core.hydra_config import HydraConfig

    from ragen2.controller import EnvFailureError, TrainingStopped
    from ragen2.rollout.envs import EnvSpecError
    from ragen2.cluster import HardwareError, PlacementError
    from ragen2.sync import WeightSyncError

    try:
        typed = to_config(cfg)
    except ConfigError as e:
        _fail(str(e))
    logging.getLogger("ragen2").setLevel(logging.INFO)
    try:
        train(typed, HydraConfig.get().runtime.output_dir)
    except (EnvSpecError, FileNotFoundError, HardwareError, PlacementError) as e:
        _fail(str(e))
    except (EnvFailureError, TrainingStopped, WeightSyncError) as e:  # stopped itself, with a reason
        _fail(str(e), code=1)


def main(argv: Sequence[str] | None = None) -> None:
    import hydra

    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        check_override_keys([a for a in argv if not a.startswith("-")])
    except ConfigError as e:
        _fail(str(e))
    register_schema()
    sys.argv = [sys.argv[0], *normalize_overrides(argv)]
    hydra.main(config_path=f"pkg://{CONFIG_MODULE}", config_name="config", version_base="1.3")(_hydra_main)()


if __name__ == "__main__":
    main()
