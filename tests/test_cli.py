"""``ragen2 <command>``: one entry point whose commands are the modules' own ``main``; the older
console scripts stay as aliases."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from ragen2.cli import ALIASES, COMMANDS, main

ROOT = Path(__file__).resolve().parents[1]


def test_help_lists_every_command(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for name in COMMANDS:
        assert f"  {name} " in out, name
    assert main([]) == 0


def test_an_unknown_command_exits_2_with_the_list(capsys):
    assert main(["trian"]) == 2
    err = capsys.readouterr().err
    assert "unknown command 'trian'" in err and "sweep-report" in err


@pytest.mark.parametrize("name", [n for n in COMMANDS if n != "train"] + list(ALIASES))
def test_every_command_has_its_own_help(name, capsys):
    with pytest.raises(SystemExit) as e:
        main([name, "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage:") and len(out.splitlines()) > 3, out


def test_ragen2_train_help_lists_the_config_groups(capsys):
    assert main(["train", "--help"]) == 0
    out = capsys.readouterr().out
    assert "+experiment=" in out and "ragen2_sokoban" in out and "top_p" in out
    assert len(out.splitlines()) < 40  # not the whole composed config
    assert "docs/reference/configuration.md" in out


def test_ragen2_train_hydra_help_is_hydras():
    """No run: --hydra-help prints and exits."""
    r = subprocess.run([str(Path(sys.executable).parent / "ragen2"), "train", "--hydra-help"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "Hydra" in r.stdout


def test_the_console_scripts_are_the_commands_aliases():
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["ragen2"] == "ragen2.cli:main"
    modules = {module for module, _ in COMMANDS.values()}
    for name, target in scripts.items():
        if name != "ragen2":
            assert target.split(":")[0] in modules, (name, target)
