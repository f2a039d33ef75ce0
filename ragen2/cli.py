"""``ragen2 <command>``: the one command-line entry point.

Each command is a module's ``main(argv)``; the older console scripts (``ragen2-train``,
``ragen2-report``, ``ragen2-analyze``, ``ragen2-sweep-report``) stay as aliases of the same
functions. ``ragen2 <command> --help`` is that command's own help.
"""

from __future__ import annotations

import importlib
import sys
from typing import Sequence

#: command -> (module whose ``main(argv)`` runs it, what it does)
COMMANDS: dict[str, tuple[str, str]] = {
    "train": ("ragen2.train", "train (Hydra overrides; -m for a sweep): warm start, RL, evaluation"),
    "eval": ("ragen2.evaluate", "held-out success of a checkpoint or a model, without training"),
    "export": ("ragen2.export", "a checkpoint as a Hugging Face model folder (LoRA merged)"),
    "report": ("ragen2.analysis.report", "one self-contained HTML page for a run or a sweep"),
    "analyze": ("ragen2.analysis.analyze", "offline MI, plots and the diagnosis of a run's rollouts"),
    "sweep-report": ("ragen2.analysis.sweep_report", "a sweep's jobs as a markdown table and plots"),
    "memory": ("ragen2.cluster.__main__", "does a config fit its GPUs? the per-GPU memory estimate"),
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


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage(), end="")
        return 0
    name = ALIASES.get(argv[0], argv[0])
    if name not in COMMANDS:
        print(f"ragen2: unknown command {argv[0]!r}\n\n{usage()}", file=sys.stderr, end="")
        return 2
    from ragen2.train import import_from_working_dir

    import_from_working_dir()  # env.id=<module>:<id> names a module in the user's own folder
    module = importlib.import_module(COMMANDS[name][0])
    if name == "train":  # Hydra reads sys.argv itself; its --help names the program
        sys.argv = ["ragen2 train", *argv[1:]]
    result = module.main(argv[1:])
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())
