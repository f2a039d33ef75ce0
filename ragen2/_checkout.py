"""A source checkout used without ``pip install``: ``envs/`` and ``configs/`` under their
installed names.

``pyproject.toml`` installs the checkout's ``envs/`` as the package ``ragen2_envs`` and ``configs/``
as ``ragen2_configs`` (``package-dir``); an installed ragen2 (``pip install -e .``, a wheel, the
Docker image) imports them by those names. Run from a checkout with only ``PYTHONPATH=<checkout>``
(``launch/gpu_check.sh`` on a bare GPU machine, ``python launch/gpu_check.py``), neither name
exists: :func:`register_checkout_packages` then makes the same mapping with importlib, loading each
folder beside ``ragen2/`` as a package under its installed name. ``ragen2/__init__.py`` calls it only
when ``import ragen2_envs`` finds nothing, so an installed ragen2 never goes through here.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

#: installed name -> the checkout folder it is installed from (pyproject's package-dir)
PACKAGE_DIRS = {"ragen2_envs": "envs", "ragen2_configs": "configs"}


def register_checkout_packages() -> list[str]:
    """Register each of :data:`PACKAGE_DIRS` that is not importable from the folder beside this
    ``ragen2/`` (when it is a checkout: the folder has an ``__init__.py``); the names registered."""
    root = Path(__file__).resolve().parent.parent
    done = []
    for name, folder in PACKAGE_DIRS.items():
        init = root / folder / "__init__.py"
        if name in sys.modules or not init.is_file() or importlib.util.find_spec(name) is not None:
            continue
        spec = importlib.util.spec_from_file_location(
            name, init, submodule_search_locations=[str(init.parent)])
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[name]
            raise
        done.append(name)
    return done
