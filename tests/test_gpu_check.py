"""launch/gpu_check.py rehearsed on the CPU: the same sections a lent GPU runs (learner, HF engine
in a second process, probe, weight push, generation), so the script cannot rot between loans; and
launch/gpu_check.sh run as on a bare CUDA machine, from a checkout that is not installed."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
#: what a bare CUDA machine lacks besides ragen2 itself (gpu_check.sh's step 1 must not need them)
BARE_MISSING = ("ray", "hydra", "vllm")


def bare_checkout(tmp_path: Path, missing: tuple[str, ...] = BARE_MISSING) -> tuple[Path, dict]:
    """A copy of the checkout (``ragen2/``, ``envs/``, ``configs/``, ``launch/``) and the
    environment of an interpreter on whose path ragen2 is not installed: this venv's python with
    ``-S`` (a wrapper script, ``$PYTHON``: its own site-packages and their ``.pth`` files, the
    editable install's among them, are never read) and on ``PYTHONPATH`` a folder of links to
    the venv's packages less ragen2's install, the ``.pth`` files and ``missing`` (absent, as on
    a bare CUDA machine). Fast: nothing is installed, the copy is ~2 MB."""
    copy = tmp_path / "checkout"
    for d in ("ragen2", "envs", "configs", "launch"):
        shutil.copytree(REPO / d, copy / d, ignore=shutil.ignore_patterns("__pycache__"))
    drop = {"ragen2", *missing, *(f"{m}_core" for m in missing)}
    site = tmp_path / "site-packages"
    site.mkdir()
    for venv_site in (Path(p) for p in sys.path if p.endswith("site-packages")):
        for entry in venv_site.iterdir():
            top = entry.name.split("-")[0].split(".")[0]
            if (top in drop or (top.endswith("_plugins") and top[:-8] in drop)
                    or entry.suffix == ".pth" or entry.name.startswith("__editable__")):
                continue
            if not (site / entry.name).exists():
                (site / entry.name).symlink_to(entry)
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\nexec {sys.executable} -S "$@"\n')
    python.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(PYTHON=str(python), PYTHONPATH=str(site), RAGEN2_CACHE=str(tmp_path / "cache"))
    return copy, env


def test_gpu_check_sh_runs_from_a_checkout_without_an_install(tmp_path):
    """No run: ``DEVICE=cpu bash launch/gpu_check.sh OUT`` (step 1, the CPU rehearsal of
    gpu_check.py, small sizes) from a copy of the checkout with an interpreter on whose path
    ragen2 is not installed and Ray, Hydra and vLLM cannot be imported, as on a bare CUDA machine:
    the first GPU run failed there in its first seconds (No module named 'ragen2_envs')."""
    copy, env = bare_checkout(tmp_path)
    out = tmp_path / "out"
    proc = subprocess.run(
        ["bash", str(copy / "launch" / "gpu_check.sh"), str(out), "", "--steps", "1",
         "--pushes", "1", "--rows", "4", "--length", "32", "--probe-tokens", "64",
         "--score-rows", "4", "--score-width", "16", "--gen-prompts", "2", "--gen-tokens", "4"],
        env={**env, "DEVICE": "cpu", "SCRATCH": str(tmp_path / "scratch")}, cwd=tmp_path,
        capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-3000:])
    summary = json.loads((out / "summary.json").read_text())
    assert summary["failed"] == [] and len(summary["sections"]) == 10
    found = summary["sections"]["env"]
    assert found["ragen2_from"] == str(copy / "ragen2")  # the copy, not this checkout's install
    assert found["ragen2_envs_from"] == str(copy / "envs")
    assert all(found[m].startswith("missing") for m in ("ray", "hydra", "vllm"))
    assert summary["args"]["pushes"] == 1 and summary["args"]["micro_batch"] == 4  # over --quick
    assert "== 2" not in proc.stdout  # DEVICE=cpu stops after step 1


def test_gpu_check_py_and_the_cli_run_from_a_checkout_without_an_install(tmp_path):
    """No run: ``python launch/gpu_check.py`` finds the checkout by its own path (no PYTHONPATH),
    with ``envs/`` and ``configs/`` under their installed names (ragen2/_checkout.py), so the
    modules its sections import load and Hydra composes the config from the copy (what
    ``python -m ragen2.train`` does in a checkout)."""
    copy, env = bare_checkout(tmp_path, missing=("ray", "vllm"))
    probe = f"""
import json, runpy, sys
runpy.run_path({str(copy / "launch" / "gpu_check.py")!r}, run_name="gpu_check")
import ragen2, ragen2_configs, ragen2_envs
from ragen2.controller import learner_settings
from ragen2.engines.hf import HFEngine
from ragen2.learner.probes import score_budget
from ragen2.learner.rank import LearnerRank
from ragen2.sync.cuda_ipc import share_next_bucket
from ragen2.compose import load_config
cfg = load_config(["monitor.score_tokens=64"])
print(json.dumps([m.__file__ for m in (ragen2, ragen2_envs, ragen2_configs)]
                 + [cfg.monitor.score_tokens, "ray" in sys.modules]))
"""
    proc = subprocess.run([env["PYTHON"], "-c", probe], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    files = json.loads(proc.stdout.strip().splitlines()[-1])
    assert files == [str(copy / "ragen2" / "__init__.py"), str(copy / "envs" / "__init__.py"),
                     str(copy / "configs" / "__init__.py"), 64, False]


@pytest.mark.e2e
def test_gpu_check_rehearsal_on_cpu(tmp_path):
    """Own run: the script is its own process (as on the lent machine), so no shared fixture."""
    out, scratch = tmp_path / "gc", tmp_path / "scratch"
    proc = subprocess.run([sys.executable, str(REPO / "launch" / "gpu_check.py"), "--device", "cpu",
                           "--quick", "--out", str(out), "--scratch", str(scratch)],
                          capture_output=True, text=True, timeout=600)
    summary = json.loads((out / "summary.json").read_text())
    sections = summary["sections"]
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-3000:])
    assert summary["failed"] == []
    assert list(sections) == ["env", "model", "nccl_group", "start", "precision", "update",
                              "scorer", "push", "generate", "versus_hand"]
    assert all(s["ok"] for s in sections.values())
    assert [p.name for p in out.iterdir()] == ["summary.json"]  # scratch files stay in --scratch
    # the built model's logits now spread like a pretrained model's
    model = sections["model"]
    assert model["after"]["logit_std"] == pytest.approx(3.0, rel=1e-3)
    assert model["before"]["logit_std"] < 1.0 and model["path"].startswith(str(scratch))
    assert sections["nccl_group"]["group"] == "ProcessGroupGloo"
    # fp32 everywhere: the engine and the learner agree to float noise on the same weights
    prec = sections["precision"]
    assert prec["probe_gap"]["mean"] < 1e-5 and prec["probe_floor"] == prec["probe_gap"]["mean"]
    assert prec["probe_threshold"] == 1e-3  # the fp32 absolute minimum
    assert prec["learner_vs_fp32"]["max"] < 1e-5
    up = sections["update"]
    assert up["steps"] == 2 and all(math.isfinite(g) and g > 0 for g in up["grad_norm"])
    assert up["estimate_gib"]["logits"] > 0
    sc = sections["scorer"]
    assert sc["score_tokens_64"]["estimate_gib"] < sc["unsliced"]["estimate_gib"]
    pushes = sections["push"]["pushes"]
    assert len(pushes) == 3
    for i, p in enumerate(pushes):
        # each update made the engine stale (every checked tensor differs); the push repairs it
        assert p["stale_tensors_before"] == p["checked_tensors"] > 0
        assert p["probe_gap_before"]["mean"] > 1e-3 and p["probe_gap_after"]["mean"] < 1e-5
        assert p["buckets"] > 1 and p["engine_version"] == 3 + i
        assert p["engine_memory"]["rss_gib"] > 0 and p["learner_memory"]["rss_gib"] > 0
    gen = sections["generate"]
    assert 0 < gen["tokens"] <= 4 * 16 and gen["tokens_per_s"] > 0  # a sampled EOS may end one early
    versus = sections["versus_hand"]
    assert versus["micro_batch_1"]["ratio"] > 0 and versus["micro_batch_4"]["hand_s"] > 0


def test_gpu_check_times_the_update_beside_a_hand_written_loop(tiny_model_path):
    """No run: the ``versus_hand`` section on the CPU, tiny model and batch (a few seconds):
    both updates train (the hand loop's weights move), a ratio and FLOP/s per micro-batch size,
    no peak share without a known peak; the learner's micro-batch size is restored."""
    import numpy as np

    from ragen2.controller import learner_settings
    from ragen2.learner.rank import LearnerRank
    from ragen2.models.loading import load_tokenizer

    gpu_check = _gpu_check()
    args = gpu_check.parse(["--device", "cpu", "--quick", "--steps", "1", "--rows", "4",
                            "--length", "24", "--micro-batch", "2", "--out", "/tmp/unused"])
    cfg = gpu_check.learner_config(args)
    learner = LearnerRank(cfg, tiny_model_path, 0, 1, threads=1, settings=learner_settings(cfg))
    learner.setup("127.0.0.1", 0)
    try:
        before = {k: v.copy() for k, v in learner.policy_weights().items()}
        out = gpu_check.section_versus_hand(learner, tiny_model_path, args,
                                            len(load_tokenizer(tiny_model_path)))
        assert learner.cfg.algorithm.micro_batch_size == 2 and learner.get_version() == 4
        assert any(not np.array_equal(v, before[k]) for k, v in learner.policy_weights().items())
    finally:
        learner.shutdown()
    assert out["tokens"] == 4 * 24 and out["peak_tflops"] is None
    for micro in (1, 2):
        m = out[f"micro_batch_{micro}"]
        assert m["ratio"] == pytest.approx(m["ragen2_s"] / m["hand_s"], rel=0.02)
        assert m["ragen2_tflops"] > 0 and m["ragen2_peak_share"] is None


def test_gpu_check_keeps_scratch_out_of_the_output_folder(tmp_path, capsys):
    gpu_check = _gpu_check()
    with pytest.raises(SystemExit):
        gpu_check.parse(["--out", str(tmp_path), "--scratch", str(tmp_path / "cache")])
    assert "inside --out" in capsys.readouterr().err
    a = gpu_check.parse(["--out", str(tmp_path / "o"), "--scratch", str(tmp_path / "s")])
    assert a.pushes == 5 and a.score_rows == 64 and a.score_width == 400


def _gpu_check():
    sys.path.insert(0, str(REPO / "launch"))
    try:
        import gpu_check
    finally:
        sys.path.remove(str(REPO / "launch"))
    return gpu_check


def test_gpu_check_refuses_bf16_on_cpu(capsys):
    gpu_check = _gpu_check()
    with pytest.raises(SystemExit):
        gpu_check.parse(["--device", "cpu", "--dtype", "bfloat16"])
    assert "float32" in capsys.readouterr().err
