"""Composing the config: Hydra's YAML (``configs/``, installed as ``ragen2_configs``) and the
command line's overrides onto the typed schema (:mod:`ragen2.config`), then every check.

:func:`load_config` is the one call (tests, notebooks, ``ragen2 eval`` / ``export``); the
``ragen2 train`` entry point (:mod:`ragen2.train`) uses the pieces: :func:`register_schema` puts
the schema in Hydra's ConfigStore, :func:`check_override_keys` and :func:`normalize_overrides`
look at the overrides before Hydra does, :func:`config_error` turns Hydra's and OmegaConf's
errors into a :class:`~ragen2.config.ConfigError` of a few lines, and :func:`to_config` types the
composed config, resolves the machine-dependent values (``model.dtype=auto``, the learner's
memory knobs: :mod:`ragen2.cluster.auto`) and runs :func:`ragen2.config_check.check_config`.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import re
from typing import Any, Mapping, Sequence

from omegaconf import DictConfig, OmegaConf

from ragen2.config import Config, ConfigError
from ragen2.config_check import check_config

CONFIG_MODULE = "ragen2_configs"  # configs/ as installed: config.yaml and the config groups


def load_config(overrides: Sequence[str] = (), config_name: str = "config") -> Config:
    """Compose ``configs/config.yaml`` with overrides and validate it (for tests and notebooks).

    Every bad override (unknown key, wrong type, bad syntax, out of range) raises
    :class:`ConfigError`.
    """
    from hydra import compose, initialize_config_module
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    check_override_keys(list(overrides))
    register_schema()
    overrides = normalize_overrides(list(overrides))
    with initialize_config_module(config_module=CONFIG_MODULE, version_base="1.3"):
        try:
            cfg = compose(config_name=config_name, overrides=overrides)
        except (HydraException, OmegaConfBaseException, ValueError, TypeError) as e:
            raise config_error(e, overrides) from e  # ValueError, TypeError: env=null, env=[{}]
        return to_config(cfg)


@functools.cache
def register_schema() -> None:
    """Register :class:`Config` in Hydra's ConfigStore (``configs/config.yaml`` builds on it).

    Once per process: building the structured node from the dataclasses took a fifth of every
    :func:`load_config` call (0.08 of 0.42 s profiled), and the store keeps it."""
    from hydra.core.config_store import ConfigStore

    ConfigStore.instance().store(name="ragen2_schema", node=Config)


def _tidy(message: str) -> str:
    """Hydra's or OmegaConf's message without the node details and the config search path."""
    message = re.sub(r":\n((?:\t.*(?:\n|$))+)",
                     lambda m: ": " + ", ".join(m.group(1).split()) + "\n", message)
    lines = [ln.strip() for ln in message.split("Config search path:")[0].splitlines()]
    return "\n".join(ln for ln in lines if ln.strip("^") and not ln.startswith(
        ("full_key:", "reference_type=", "object_type=")))


def config_error(e: Exception, overrides: Sequence[str] = ()) -> ConfigError:
    """A Hydra or OmegaConf error (override syntax, wrong type, unknown group option, broken
    interpolation) as a :class:`ConfigError` naming the key, in a few lines."""
    from hydra.errors import HydraException, OverrideParseException
    from omegaconf.errors import OmegaConfBaseException

    given = {ov.lstrip("+~").partition("=")[0]: ov.partition("=")[2] for ov in overrides}
    oc = e if isinstance(e, OmegaConfBaseException) else e.__cause__
    detail = str(e)
    if not isinstance(e, (HydraException, OmegaConfBaseException)):  # Hydra fails on env=[{}]
        detail = f"not an override Hydra can apply ({type(e).__name__}: {e})"
    if isinstance(e, OverrideParseException):
        key, _, value = e.override.lstrip("+~").partition("=")
        detail = e.message
    elif isinstance(oc, OmegaConfBaseException) and oc.full_key and (
            oc is e or detail.startswith("Error merging override")):  # a wrong type, mostly
        key, value, detail = oc.full_key, given.get(oc.full_key, oc.value), oc.msg or str(oc)
    else:  # a group option that does not exist, an ambiguous value, a bad + or ~ ...
        named = [k for k in given if f"'{k}" in detail or f" {k}=" in detail]
        named = named or (list(given) if len(given) == 1 else [])
        key = max(named, key=len) if named else "overrides"
        value = given.get(key, " ".join(overrides))
    return ConfigError(key, value, _tidy(detail))


def to_config(cfg: DictConfig | Config) -> Config:
    """Turn a composed DictConfig into the typed :class:`Config` and run every range check."""
    from omegaconf.errors import OmegaConfBaseException

    try:
        if not isinstance(cfg, Config):
            _check_known_keys(OmegaConf.to_container(cfg, resolve=False), _schema_keys(Config()))
        typed = cfg if isinstance(cfg, Config) else OmegaConf.to_object(cfg)
    except OmegaConfBaseException as e:  # e.g. an interpolation that does not resolve
        raw: Any = OmegaConf.to_container(cfg, resolve=False)
        for part in (e.full_key or "").split("."):
            raw = raw.get(part) if isinstance(raw, dict) else None
        raise config_error(e, [f"{e.full_key}={raw}"] if isinstance(raw, str) else []) from e
    if not isinstance(typed, Config):
        raise TypeError(f"expected a ragen2 Config, got {type(typed).__name__}")
    from ragen2.cluster.auto import resolve_dtype, resolve_memory_knobs

    typed = resolve_dtype(typed)  # model.dtype=auto: by this machine
    check_config(typed)
    return resolve_memory_knobs(typed)  # null learner memory knobs: by the memory estimate


def _schema_keys(node: Any, prefix: str = "") -> dict[str, Any]:
    """All dotted leaf/section keys of the schema; dict-typed fields are free-form below."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(node):
        key = f"{prefix}{f.name}"
        val = getattr(node, f.name)
        out[key] = val
        if dataclasses.is_dataclass(val):
            out.update(_schema_keys(val, key + "."))
    return out


def normalize_overrides(overrides: list[str]) -> list[str]:
    """Let keys below a free-form dict field (``env.kwargs.size=5``) be added as well as changed.

    Hydra refuses a new key in a typed config unless it is written ``++key=value``; entries of
    ``env.kwargs`` are the env's own constructor arguments, so they get that prefix here.
    """
    dict_fields = {k for k, v in _schema_keys(Config()).items() if isinstance(v, dict)}
    out = []
    for ov in overrides:
        key = ov.split("=", 1)[0]
        if "=" in ov and not key.startswith(("+", "~")) and any(
                key.startswith(f + ".") for f in dict_fields):
            ov = "++" + ov
        out.append(ov)
    return out


def check_override_keys(overrides: list[str]) -> None:
    """Fail fast on command-line overrides whose key is not in the schema, with suggestions.

    Hydra would refuse them too, but without naming what is allowed. Group selections (``env=x``),
    ``hydra.*`` keys, additions (``+k=v``) and deletions (``~k``) are left to Hydra.
    """
    keys = _schema_keys(Config())
    for ov in overrides:
        if "=" not in ov or ov.startswith(("+", "~", "hydra.", "hydra/")):
            continue
        key = ov.split("=", 1)[0]
        if "@" in key or "/" in key:
            continue
        parts = key.split(".")
        for i in range(1, len(parts) + 1):
            sub = ".".join(parts[:i])
            if sub not in keys:
                break
            if isinstance(keys[sub], dict):  # free-form dict such as env.kwargs.size=5
                sub = None
                break
        else:
            sub = None
        if sub is not None and sub == key and _is_config_group(key):  # experiment=ragen2_sokoban
            value = ov.split("=", 1)[1]
            raise ConfigError(key, value, f"unknown key: {key} is a config group that "
                              f"config.yaml's defaults do not list; add it with a '+': "
                              f"+{key}={value}")
        if sub is not None:
            raise _unknown_key(keys, sub, ov.split("=", 1)[1])


def _is_config_group(name: str) -> bool:
    """Whether ``configs/<name>/`` is a config group (``experiment``), ``hydra`` aside."""
    from importlib.resources import files

    return name != "hydra" and "." not in name and files(CONFIG_MODULE).joinpath(name).is_dir()


def _unknown_key(keys: Mapping[str, Any], key: str, value: Any) -> ConfigError:
    parent, _, leaf = key.rpartition(".")
    siblings = sorted(k.rpartition(".")[2] for k in keys if k.rpartition(".")[0] == parent)
    close = difflib.get_close_matches(leaf, siblings, n=1)
    hint = f" Did you mean '{(parent + '.') if parent else ''}{close[0]}'?" if close else ""
    where = f"'{parent}'" if parent else "the top level"
    return ConfigError(key, value,
                       f"unknown key.{hint} Keys allowed under {where}: {', '.join(siblings)}")


def _check_known_keys(raw: Mapping[str, Any], keys: Mapping[str, Any], prefix: str = "") -> None:
    """Refuse a key that composition added but the schema lacks (``+trainer.total_stepz=3``)."""
    for name, value in raw.items():
        key = f"{prefix}{name}"
        if key not in keys:
            raise _unknown_key(keys, key, value)
        if dataclasses.is_dataclass(keys[key]) and isinstance(value, Mapping):
            _check_known_keys(value, keys, key + ".")
