"""Every command the tutorials show, run exactly as written (tier 2).

Each page's ``bash`` blocks are its commands, one per line (a trailing backslash continues a line),
run in order with bash from a fresh copy of the repository's layout: ``examples/`` copied and
``.venv`` linked to this venv, so ``cd examples && ../.venv/bin/ragen2 ...`` and
``.venv/bin/ragen2 ...`` mean there what the page says, and every output stays in pytest's tmp
dir. Nothing else is set (no PYTHONPATH). The budgets are the pages' own.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TUTORIALS = ROOT / "docs" / "tutorials"
VENV = Path(sys.executable).parent.parent


def page_commands(page: Path) -> list[str]:
    """The command lines of a page's ```bash blocks, continuation lines joined."""
    out = []
    for block in re.findall(r"```bash\n(.*?)```", page.read_text(), re.S):
        for line in block.replace("\\\n", " ").splitlines():
            if line.strip() and not line.lstrip().startswith("#"):
                out.append(" ".join(line.split()))
    return out


def run_page(name: str, tmp_path: Path, timeout: float) -> Path:
    """Run every command of ``docs/tutorials/<name>`` in order; returns the copy's root."""
    root = tmp_path / "repo"
    root.mkdir()
    (root / ".venv").symlink_to(VENV, target_is_directory=True)
    shutil.copytree(ROOT / "examples", root / "examples",
                    ignore=shutil.ignore_patterns("outputs", "__pycache__"))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["RAY_AUTH_MODE"] = "disabled"
    commands = page_commands(TUTORIALS / name)
    assert commands, name
    for cmd in commands:
        # a session of its own: a command past its timeout goes with every process it started
        proc = subprocess.Popen(["bash", "-c", cmd], cwd=root, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=True)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise
        assert proc.returncode == 0, f"{name}: {cmd}\n{out[-2000:]}\n{err[-4000:]}"
    return root


def test_every_tutorial_is_run_here():
    """No run: the pages are only read."""
    pages = {p.name for p in TUTORIALS.glob("*.md")}
    tested = {"add-an-environment.md", "snr-sweep.md", "real-model.md", "remote-env.md"}
    assert pages == tested
    for page in pages:
        assert "tests/test_tutorials.py" in (TUTORIALS / page).read_text()


@pytest.mark.e2e
def test_add_an_environment(tmp_path):
    """Own run: the tutorial's commands as typed (the console script from examples/, no
    PYTHONPATH): 2 steps on the user's corridor, its report, a held-out evaluation of its last
    checkpoint (vLLM loading the exported folder) and an export."""
    root = run_page("add-an-environment.md", tmp_path, timeout=400)
    run = root / "examples" / "outputs" / "corridor"
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == [0, 1, 2]
    assert rows[-1]["actor/logprob_gap"] < 1e-3
    assert "cell" in (run / "samples" / "eval_step_000000.jsonl").read_text()
    assert (run / "report.html").stat().st_size > 10_000
    ev = json.loads((run / "eval" / "step_000002" / "eval.json").read_text())
    assert ev["episodes"] == 8 and 0 <= ev["eval/success"] <= 1
    assert (root / "examples" / "exported" / "corridor" / "config.json").is_file()


@pytest.mark.e2e
def test_an_snr_sweep(tmp_path):
    """Own run: the tutorial's two-job multirun (2 steps each) and both reports over it."""
    root = run_page("snr-sweep.md", tmp_path, timeout=1200)
    sweep = root / "sweeps" / "top_p"
    jobs = sorted(p.parent.name for p in sweep.glob("*/metrics.jsonl"))
    # one folder per job, numbered, each named by its overrides (sorted: other keys come first)
    assert [j.split("_")[0] for j in jobs] == ["0", "1"], jobs
    assert "filter.value=0.5" in jobs[0] and "filter.value=1.0" in jobs[1], jobs
    assert "filter.value" in (sweep / "sweep_report.md").read_text()
    assert (sweep / "report.html").is_file()


@pytest.mark.e2e
def test_a_real_model(tmp_path, smollm2_path):
    """Own run: no training; SmolLM2's short zero-shot evaluation and a GPU preset's memory
    estimate, as the tutorial types them (``smollm2_path``: converted once, skipped without the
    smollm2 extra)."""
    root = run_page("real-model.md", tmp_path, timeout=600)
    ev = json.loads((root / "eval" / "smollm2" / "eval.json").read_text())
    assert ev["episodes"] == 4 and "eval/format_error_rate" in ev


@pytest.mark.e2e
def test_train_on_an_env_served_over_http(tmp_path):
    """Own run: the tutorial's commands as typed: ``ragen2 serve-env`` in the background (port 0,
    its URL in env.url), 2 steps on ``ragen2/Remote-v0`` pointed at it, the report, the server
    stopped by the page's last command (here too if a command failed first)."""
    try:
        root = run_page("remote-env.md", tmp_path, timeout=600)
    finally:
        pid = tmp_path / "repo" / "serve.pid"
        if pid.exists():
            try:
                os.kill(int(pid.read_text()), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass  # stopped by the page itself
    run = root / "outputs" / "remote"
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == [0, 1, 2]
    assert all(row.get("rollout/env_errors", 0) == 0 for row in rows)
    assert any("collapse/grounding/checkable_frac" in row for row in rows)  # ground() over HTTP
    assert "serving ragen2/FrozenLake-v0 at http://127.0.0.1:" in (root / "serve.log").read_text()
    assert (run / "report.html").stat().st_size > 10_000
