"""ragen2.runlog: the ``ragen2`` logger's lines reach RUN_DIR/train.log and the console, once each,
whether Hydra configured logging (``ragen2-train``) or not (``train(cfg, run_dir)`` from Python)."""

from __future__ import annotations

import logging
import sys

from ragen2.runlog import FILE_FORMAT, run_log

LINE = "held-out success before RL: 0.250 (8 episodes)"


def test_an_in_process_run_gets_train_log_and_console_lines(tmp_path, capsys):
    logger = logging.getLogger("ragen2")
    handlers, level = list(logger.handlers), logger.level
    with run_log(tmp_path) as log:
        log.info(LINE)
        log.warning("collapse alert at step 3: panel MI under its floor")
        log.debug("not at INFO")
    log.info("after the run: nowhere of the run's")
    text = (tmp_path / "train.log").read_text()
    assert LINE in text and "[ragen2][WARNING] - collapse alert at step 3" in text
    assert "not at INFO" not in text and "after the run" not in text
    out = capsys.readouterr().out
    assert f"[ragen2][INFO] {LINE}" in out and "collapse alert at step 3" in out
    assert (logger.handlers, logger.level) == (handlers, level)  # nothing left behind


def test_a_resumed_run_appends_to_its_train_log(tmp_path):
    for n in (1, 2):
        with run_log(tmp_path) as log:
            log.info("segment %d", n)
    lines = (tmp_path / "train.log").read_text().splitlines()
    assert [ln.rsplit(" - ", 1)[1] for ln in lines] == ["segment 1", "segment 2"]


def test_under_hydras_job_logging_no_line_is_written_twice(tmp_path, capsys):
    """Hydra's default job logging: root at INFO with a stdout handler and RUN_DIR/train.log."""
    root = logging.getLogger()
    hydra_like = [logging.StreamHandler(sys.stdout), logging.FileHandler(tmp_path / "train.log")]
    for h in hydra_like:
        h.setFormatter(logging.Formatter(FILE_FORMAT))
        root.addHandler(h)
    try:
        with run_log(tmp_path) as log:
            assert log.handlers == []  # Hydra's handlers already do both
            log.info(LINE)
    finally:
        for h in hydra_like:
            root.removeHandler(h)
            h.close()
    assert (tmp_path / "train.log").read_text().count(LINE) == 1
    assert capsys.readouterr().out.count(LINE) == 1
