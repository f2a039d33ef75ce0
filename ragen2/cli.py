"""``ragen2 <command>``: the one command-line entry point.

Each command is a module's ``main(argv)``; the older console scripts (``ragen2-train``,
``ragen2-report``, ``ragen2-analyze``, ``ragen2-sweep-report``) stay as aliases of the same
functions. ``ragen2 <command> --help`` is that command's own help.
"""

from __future__ import annotations

import importlib
import sys
import textwrap
from typing import Sequence

#: command -> (module whose ``main(argv)`` runs it, what it does)
COMMANDS: dict[str, tuple[str, str]] = {
    "train": ("ragen2.train", "train (Hydra overrides; -m for a sweep): warm start, RL, evaluation"),
    "eval": ("ragen2.evaluate", "held-out success of a checkpoint or a model, without training"),
    "export": ("ragen2.export", "a checkpoint as a Hugging Face model folder (LoRA merged)"),
    "report": ("ragen2.analysis.report", "one self-contained HTML page for a run or a sweep"),
    "analyze": ("ragen2.analysis.analyze", "offline MI, plots and the diagnosis of a run's rollouts"),
    "sweep-report": ("ragen2.analysis.sweep_report", "a sweep's jobs as a markdown table and plots"),
    "memory": ("ragen2.memory", "does a config fit its GPUs? the per-GPU memory estimate"),
    "serve-env": ("ragen2.rollout.serve", "serve a Gymnasium text env over HTTP (train on it: "
                                          "env.id=ragen2/Remote-v0)"),
}
ALIASES = {"plan": "memory", "evaluate": "eval", "sweep_report": "sweep-report"}


def usage() -> str:
    width = max(map(len, COMMANDS))
    lines = [f"  {name:<{width}}  {about}" for name, (_, about) in COMMANDS.items()]
    return ("usage: ragen2 <command> [args...]\n\n"
            "Multi-turn LLM-agent RL that finds and fixes reasoning collapse.\n\ncommands:\n"
            + "\n".join(lines)
            + "\n\n'ragen2 <command> --help' describes a command. 'ragen2 train --help' lists the "
              "config groups;\nevery key: the documentation's Configuration reference.\n")


def train_help() -> str:
    """``ragen2 train --help``: the config groups and their options, and where every key is
    documented (Hydra's own help, with the whole composed config: ``--hydra-help``, ``--cfg job``)."""
    from importlib.resources import files

    from ragen2.compose import CONFIG_MODULE

    root = files(CONFIG_MODULE)
    groups = sorted(d.name for d in root.iterdir() if d.is_dir() and not d.name.startswith("_")
                    and d.name not in ("hydra", "algorithm_invariants"))
    lines = []
    for g in groups:
        options = sorted(f.name[:-5] for f in root.joinpath(g).iterdir() if f.name.endswith(".yaml"))
        add = "+" if g == "experiment" else ""
        lines.append(textwrap.fill(f"{add}{g}=" + " | ".join(options), 98, initial_indent="  ",
                                   subsequent_indent=" " * (len(add + g) + 3)))
    return ("usage: ragen2 train [-m] [GROUP=OPTION ...] [KEY=VALUE ...]\n\n"
            "Train: warm start (tiny models), RL steps of rollout -> filter -> update -> weight sync,\n"
            "held-out evaluations before, during and after. Hydra overrides; -m runs a sweep over\n"
            "comma-separated values. The run directory is hydra.run.dir (default outputs/DATE/TIME).\n\n"
            "config groups (configs/):\n" + "\n".join(lines) + "\n\n"
            "examples:\n"
            "  ragen2 train trainer.total_steps=10 seed=2\n"
            "  ragen2 train env=sokoban filter=top_p filter.value=0.9\n"
            "  ragen2 train -m filter=top_p filter.value=0.5,0.9 seed=0,1,2\n"
            "  ragen2 train +experiment=ragen2_sokoban_0.5b model.path=/models/Qwen2.5-0.5B-Instruct\n"
            "  ragen2 train hydra.run.dir=outputs/my_run trainer.resume=true\n\n"
            "Every key, its type and its default: the documentation's Configuration reference\n"
            "(docs/reference/configuration.md). The composed config: ragen2 train --cfg job [...].\n"
            "Hydra's own help: ragen2 train --hydra-help.\n")


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage(), end="")
        return 0
    name = ALIASES.get(argv[0], argv[0])
    if name not in COMMANDS:
        print(f"ragen2: unknown command {argv[0]!r}\n\n{usage()}", file=sys.stderr, end="")
        return 2
    if name == "train" and argv[1:2] in (["--help"], ["-h"]):
        print(train_help(), end="")
        return 0
    from ragen2.train import import_from_working_dir

    import_from_working_dir()  # env.id=<module>:<id> names a module in the user's own folder
    module = importlib.import_module(COMMANDS[name][0])
    if name == "train":  # Hydra reads sys.argv itself; its --help names the program
        sys.argv = ["ragen2 train", *argv[1:]]
    result = module.main(argv[1:])
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())
