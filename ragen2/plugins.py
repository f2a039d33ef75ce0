"""Plugins: the user's modules named in the config's ``plugins``, imported in every process that
reads ragen2's registries.

A registration (an advantage estimator, a policy loss, a KL estimator, a filter score, a
Gymnasium env, ...) lives in the registry of the process that imported the module making it. So
:func:`import_plugins` runs wherever a registry is read: in the driver before the config check
(:func:`ragen2.config_check.check_config`), at the start of every learner rank and rollout worker
(Ray actors), and in ``ragen2 serve-env`` (its ``--plugin``). The actors find the modules
through ``PYTHONPATH``, which :func:`ragen2.train.ensure_ray` sets for every Ray worker to the
driver's working directory and the folders the driver imported the plugins from
(:func:`plugin_paths`).
"""

from __future__ import annotations

import importlib
import os
import sys
from types import ModuleType
from typing import Sequence


class PluginError(ImportError):
    """A module named in ``plugins`` could not be imported; the message names it and why."""


def import_plugins(names: Sequence[str]) -> list[ModuleType]:
    """Import each module of ``names`` in order (once per process: Python caches modules), so
    what it registers is known here. Raises :class:`PluginError` naming the module, the
    exception it raised and where this process looked."""
    modules = []
    for name in names:
        try:
            modules.append(importlib.import_module(name))
        except Exception as e:  # noqa: BLE001 -- any failure of the user's module, named
            raise PluginError(
                f"plugin module {name!r} could not be imported: {type(e).__name__}: {e} "
                f"(a module importable from the folder ragen2 runs in, {os.getcwd()}, or from "
                f"PYTHONPATH; this process searched {_search_path()})") from e
    return modules


def plugin_paths(names: Sequence[str]) -> list[str]:
    """The ``sys.path`` folders this process imported each plugin of ``names`` from (a package's
    parent folder; nothing for one installed in the interpreter's environment): what another
    process needs on its path to import them too. Call after :func:`import_plugins`."""
    out: list[str] = []
    for name in names:
        top = sys.modules.get(name.split(".")[0])
        where = getattr(top, "__file__", None)
        if where is None:
            continue  # a namespace package or a built-in: left to PYTHONPATH
        folder = os.path.dirname(os.path.abspath(where))
        if hasattr(top, "__path__"):  # a package: its parent folder is on sys.path
            folder = os.path.dirname(folder)
        if not folder.startswith((sys.prefix, sys.base_prefix)) and folder not in out:
            out.append(folder)
    return out


def _search_path() -> str:
    """``sys.path`` without the interpreter's and the venv's own folders."""
    shown = [p or "." for p in sys.path if not p.startswith((sys.prefix, sys.base_prefix))]
    return ", ".join(shown[:6]) + (", ..." if len(shown) > 6 else "") if shown else "nothing else"
