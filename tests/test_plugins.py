"""Plugins (ragen2.plugins, the config's ``plugins``): a user's module is imported before the config
check and in every learner rank and rollout worker, so its registrations are known where they are
read; the KL estimators, aggregation modes and gates dispatch through registries a plugin adds to.

Tier 1 checks the config check, the errors and the dispatch in this process; tier 2 runs the
example of docs/development.md as written through the command line on two learner ranks.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from ragen2.config import ConfigError
from ragen2.plugins import PluginError, import_plugins, plugin_paths
from ragen2.train import load_config

ROOT = Path(__file__).resolve().parents[1]
PLUGIN = "tests.registering_plugin"


@pytest.fixture
def plugin():
    """``tests.registering_plugin``'s name; afterwards its registrations and module are gone
    again (the registries are process-wide)."""
    yield PLUGIN
    module = sys.modules.pop(PLUGIN, None)
    for registry, name in getattr(module, "REGISTERED", []):
        registry._items.pop(name, None)


def documented_example() -> tuple[str, str, str]:
    """(file name, code, command) of docs/development.md's plugin example, as the page gives them."""
    text = (ROOT / "docs" / "development.md").read_text()
    found = re.search(r"Save\s+this\s+as\s+`(\w+\.py)`.*?```python\n(.*?)```.*?```bash\n(.*?)```",
                      text, re.S)
    assert found, "docs/development.md has no 'Save this as `<module>.py`' example"
    name, code, command = found.groups()
    return name, code, " ".join(command.replace("\\\n", " ").split())


# ------------------------------------------------------------------ before the config check
def test_a_plugin_makes_its_names_pass_the_config_check(plugin):
    from tests.registering_plugin import ADV, AGG, GATE, KL

    cfg = load_config([f"plugins=[{plugin}]", f"algorithm.adv_estimator={ADV}",
                       f"algorithm.kl_estimator={KL}", f"algorithm.loss_agg_mode={AGG}",
                       f"algorithm.regulariser_gate={GATE}"])
    assert cfg.plugins == [plugin] and cfg.algorithm.adv_estimator == ADV
    assert load_config([]).plugins == []  # the default: none


@pytest.mark.parametrize("key,allowed", [
    ("adv_estimator", "allowed: gae, grpo; or a name registered by a module listed in plugins"),
    ("kl_estimator", "allowed: k1, k2, k3; or a name registered by a module listed in plugins"),
    ("loss_agg_mode", "allowed: token-mean, seq-mean-token-mean, seq-mean-token-sum, "
                      "seq-mean-token-sum-norm; or a name registered"),
    ("regulariser_gate", "allowed: none, threshold, scaled; or a name registered"),
])
def test_without_the_plugin_the_check_names_the_allowed_values_and_plugins(key, allowed):
    with pytest.raises(ConfigError) as e:
        load_config([f"algorithm.{key}=doubled_grpo"])
    assert e.value.key == f"algorithm.{key}"
    assert allowed in str(e.value)


def test_the_documented_module_passes_the_check_from_the_users_folder(tmp_path, monkeypatch):
    """The page's module, written where the page says, is found as ``ragen2 train`` finds it
    (the working directory first on ``sys.path``) and its name then passes the check."""
    from ragen2.algos import ADVANTAGE_ESTIMATORS
    from ragen2.train import import_from_working_dir

    name, code, command = documented_example()
    (tmp_path / name).write_text(code)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    import_from_working_dir()
    overrides = shlex.split(command)[2:]  # after "ragen2 train"
    assert any(o.startswith("plugins=") for o in overrides), command
    try:
        cfg = load_config(overrides)
        assert cfg.algorithm.adv_estimator in ADVANTAGE_ESTIMATORS
        assert plugin_paths(cfg.plugins) == [str(tmp_path)]  # what the Ray workers get
    finally:
        module = name[:-3]
        sys.modules.pop(module, None)
        ADVANTAGE_ESTIMATORS._items.pop("doubled_grpo", None)


# ------------------------------------------------------------------ a bad plugin
def test_a_missing_plugin_is_named_with_its_error():
    with pytest.raises(ConfigError) as e:
        load_config(["plugins=[no_such_plugin_module]"])
    assert e.value.key == "plugins"
    msg = str(e.value)
    assert "plugin module 'no_such_plugin_module' could not be imported" in msg
    assert "ModuleNotFoundError" in msg and "PYTHONPATH" in msg and os.getcwd() in msg


def test_a_plugin_that_raises_is_named_with_its_exception(tmp_path, monkeypatch):
    (tmp_path / "broken_plugin_mod.py").write_text("raise RuntimeError('half-written plugin')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(PluginError, match=r"'broken_plugin_mod' could not be imported: "
                                          r"RuntimeError: half-written plugin"):
        import_plugins(["broken_plugin_mod"])
    sys.modules.pop("broken_plugin_mod", None)


@pytest.mark.parametrize("bad", ["my_estimators.py", "my-estimators", "./my_estimators", ""])
def test_a_file_name_is_not_a_module_name(bad):
    with pytest.raises(ConfigError, match="is not a module name") as e:
        load_config([f"plugins=['{bad}']"])
    assert e.value.key == "plugins"


def test_plugin_paths_are_the_folders_the_plugins_came_from(tmp_path, monkeypatch):
    (tmp_path / "pkg_plugin").mkdir()
    (tmp_path / "pkg_plugin" / "__init__.py").write_text("")
    (tmp_path / "pkg_plugin" / "est.py").write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        import_plugins(["pkg_plugin.est", "json"])  # json: the interpreter's own, no path
        assert plugin_paths(["pkg_plugin.est", "json"]) == [str(tmp_path)]
    finally:
        sys.modules.pop("pkg_plugin.est", None)
        sys.modules.pop("pkg_plugin", None)


# ------------------------------------------------------------------ in every actor
def test_the_learner_rank_and_the_rollout_worker_import_the_plugins_first(plugin):
    """Both actors import the plugins at the very start of their constructor (the rollout worker
    before it builds its engine): a module that is missing fails there, named."""
    from ragen2.controller import learner_settings
    from ragen2.learner.rank import LearnerRank
    from ragen2.rollout.worker import RolloutWorker

    cfg = load_config([])
    LearnerRank(dataclasses.replace(cfg, plugins=[plugin]), "unused", 0, 1, threads=0,
                settings=learner_settings(cfg))
    assert plugin in sys.modules
    bad = dataclasses.replace(cfg, plugins=["no_such_plugin_module"])
    with pytest.raises(PluginError, match="no_such_plugin_module"):
        LearnerRank(bad, "unused", 0, 1, threads=0, settings=learner_settings(cfg))
    with pytest.raises(PluginError, match="no_such_plugin_module"):
        RolloutWorker(bad, "unused-model-path", 0)


def test_serve_env_imports_its_plugins(capsys):
    from ragen2.rollout.serve import main

    assert main(["ragen2/FrozenLake-v0", "--plugin", "no_such_plugin_module"]) == 2
    assert "plugin module 'no_such_plugin_module' could not be imported" in capsys.readouterr().err


# ------------------------------------------------------------------ dispatch through registries
LP = torch.tensor([[-1.0, -2.0, -1.5]])
REF = torch.tensor([[-2.0, -1.0, -1.5]])  # lp - ref = [1, -1, 0]


def test_a_plugins_kl_estimator_aggregation_and_gate_are_dispatched(plugin):
    from ragen2.algos import aggregate_loss, kl_penalty
    from ragen2.algos.gating import regulariser_weights

    import_plugins([plugin])
    from tests.registering_plugin import AGG, GATE, KL

    assert kl_penalty(LP, REF, KL).tolist() == [[1.0, 1.0, 0.0]]  # |1|, |-1|, |0|
    loss = torch.tensor([[1.0, 2.0, 3.0], [4.0, float("nan"), 0.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    assert aggregate_loss(loss, mask, AGG).item() == 7.0  # 1 + 2 + 4; the masked NaN stays out
    w = regulariser_weights(torch.tensor([1.0, 0.0, 1.0, 0.0]), torch.tensor([0, 0, 1, 1]), GATE)
    assert w.tolist() == [1.0, 1.0, 0.0, 0.0]


def test_unknown_names_list_the_registered_ones_in_order(plugin):
    from ragen2.algos import aggregate_loss, kl_penalty

    import_plugins([plugin])
    with pytest.raises(ValueError, match="allowed: k1, k2, k3, plugin_abs_k1"):
        kl_penalty(LP, REF, "k4")
    with pytest.raises(ValueError, match="seq-mean-token-sum-norm, plugin_token_sum"):
        aggregate_loss(LP, torch.ones_like(LP), "sum")


def test_the_objective_dispatches_a_plugins_kl_estimator_and_aggregation(plugin):
    """The objective reads the KL estimator and the aggregation mode by name from the config:
    a plugin's names give its hand-computed number (a plugin's advantage estimator trains a real
    learner rank in tests/learner/test_objective_extension.py)."""
    from ragen2.algos.objective import LossInputs, kl_term

    from tests.registering_plugin import AGG, KL

    cfg = load_config([f"plugins=[{plugin}]", f"algorithm.kl_estimator={KL}",
                       f"algorithm.loss_agg_mode={AGG}"])
    x = LossInputs(logprobs=LP, old_logprobs=LP, advantages=torch.zeros_like(LP),
                   mask=torch.ones_like(LP), ref_logprobs=REF, agg_mode=cfg.algorithm.loss_agg_mode)
    assert kl_term(x, cfg.algorithm).item() == 2.0  # |1| + |-1| + |0|, summed


# ------------------------------------------------------------------ tier 2: the page, as written
@pytest.mark.e2e
def test_the_documented_plugin_trains_on_two_learner_ranks(tmp_path, tiny_model_path):
    """Own run: the example of docs/development.md as written — its module saved under the page's
    file name in a folder of its own, its command run there through the console script (no
    PYTHONPATH), with the tests' small budgets added: two learner ranks (Ray actors), one RL step.
    Only the learner ranks call the advantage estimator, so a step trained at all means the
    plugin was imported in both ranks (before plugins, the config check refused the name; with
    the driver alone importing it, the ranks failed on an unknown estimator)."""
    from tests.runs import rows, small

    name, code, command = documented_example()
    assert command.startswith("ragen2 train "), command
    (tmp_path / name).write_text(code)
    extra = small(tiny_model_path, "trainer.total_steps=1", f"hydra.run.dir={tmp_path / 'run'}")
    assert "cluster.learner_world_size=2" in extra
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["RAY_AUTH_MODE"] = "disabled"
    line = command + " " + " ".join(shlex.quote(o) for o in extra)
    r = subprocess.run(["bash", "-c", line], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=900)
    assert r.returncode == 0, f"{line}\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}"
    step = rows(tmp_path / "run")[1]
    assert step["actor/optimizer_steps"] >= 1 and "actor/loss" in step
