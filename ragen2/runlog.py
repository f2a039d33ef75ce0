"""The run's log: what the ``ragen2`` logger says, in ``RUN_DIR/train.log`` and on the console.

Diagnoses, collapse alerts, evaluations and warnings go to ``logging.getLogger("ragen2")``. Under
``ragen2-train`` Hydra's job logging (its ``default`` ``hydra/job_logging``) already writes every
record to stdout and to ``<run dir>/train.log`` (the log file is named after the job,
``ragen2.train``). :func:`run_log` gives ``train(cfg, run_dir)`` called from Python (tests,
notebooks) the same: a handler on ``train.log``, and one on stdout where no handler prints the
records yet. It never adds one that is already there, so no line is written twice.
"""

from __future__ import annotations

import logging
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

LOG_FILE = "train.log"
FILE_FORMAT = "[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"  # Hydra's default
CONSOLE_FORMAT = "[%(name)s][%(levelname)s] %(message)s"


def reached_handlers(logger: logging.Logger) -> list[logging.Handler]:
    """Every handler a record of ``logger`` reaches: its own, then its ancestors' while they
    propagate."""
    out: list[logging.Handler] = []
    node: logging.Logger | None = logger
    while node is not None:
        out += node.handlers
        node = node.parent if node.propagate else None
    return out


def _prints(h: logging.Handler) -> bool:
    consoles = (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__)
    return (isinstance(h, logging.StreamHandler) and not isinstance(h, logging.FileHandler)
            and getattr(h, "stream", None) in consoles)


@contextmanager
def run_log(run_dir: str | Path, name: str = "ragen2") -> Iterator[logging.Logger]:
    """Within the block, logger ``name`` writes INFO and above to ``run_dir/train.log`` (appended
    to: a resumed run continues it) and to the console; the handlers it added go afterwards."""
    logger = logging.getLogger(name)
    path = (Path(run_dir) / LOG_FILE).absolute()
    reached = reached_handlers(logger)
    added: list[logging.Handler] = []
    if not any(isinstance(h, logging.FileHandler) and Path(h.baseFilename) == path
               for h in reached):
        added.append(logging.FileHandler(path, encoding="utf-8"))
        added[-1].setFormatter(logging.Formatter(FILE_FORMAT))
    if not any(_prints(h) for h in reached):
        added.append(logging.StreamHandler(sys.stdout))
        added[-1].setFormatter(logging.Formatter(CONSOLE_FORMAT))
    level = logger.level
    if logger.getEffectiveLevel() > logging.INFO:
        logger.setLevel(logging.INFO)
    for h in added:
        logger.addHandler(h)
    try:
        yield logger
    finally:
        for h in added:
            logger.removeHandler(h)
            h.close()
        logger.setLevel(level)
