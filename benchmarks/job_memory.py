"""Peak resident memory of every process of a real ``ragen2-train`` job, next to the CPU memory
estimate of the same config (issue 28, item 0).

The job runs as a user runs it (the ``ragen2-train`` console script, overrides as given); every
``--every`` seconds this script walks the job's process tree (the driver, Ray's GCS and raylet,
every actor and whatever they spawn) and reads each process's kernel high-water mark of the
resident set (``VmHWM`` in ``/proc/<pid>/status``, monotonic, so the last read before a process
exits is its peak up to the sampling interval). Processes are grouped by role from their Ray
process title: ``learner`` (``ray::LearnerRank``), ``engine`` (``ray::RolloutWorker`` and the
processes it spawns, e.g. vLLM's engine core), ``driver`` (the ``ragen2-train`` process) and
``ray`` (everything else: GCS, raylet, dashboard, idle workers).

The estimate is :func:`ragen2.cluster.host_memory.estimate_host_memory` for the config the
overrides compose to on this machine (the same numbers the preflight prints): one learner rank
at its peak, one rollout worker, the shared terms. ``estimate_over_peak`` >= 1 means the estimate
covers what was measured.

Usage::

    python benchmarks/job_memory.py --name issue_command -- model=smollm2 engine=vllm seed=1 \\
        trainer.total_steps=2 rollout.env_groups=2 rollout.group_size=2 trainer.eval_episodes=8

writes ``results/job_memory/<name>.json`` and the job's log beside it.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from common import RESULTS, machine, proc_status_kib  # noqa: E402

GiB = 2**30


def _title(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
    except OSError:
        return ""


def role_of(title: str, ancestors: list[str]) -> str:
    """``learner``, ``engine``, ``driver`` or ``ray`` from a process title and its ancestors'."""
    for t in [title, *ancestors]:
        if "LearnerRank" in t:
            return "learner"
        if "RolloutWorker" in t:
            return "engine"
    if "ragen2-train" in title or "ragen2.train" in title:
        return "driver"
    return "ray"


class TreeSampler:
    """Per-pid peak ``VmHWM`` (and the title under which it was first seen as an actor) of a
    process tree, sampled with psutil."""

    def __init__(self, root: int) -> None:
        self.root = root
        self.procs: dict[int, dict[str, Any]] = {}

    def sample(self) -> None:
        import psutil

        try:
            root = psutil.Process(self.root)
            kids = root.children(recursive=True)
        except psutil.NoSuchProcess:
            return
        for p in [root, *kids]:
            st = proc_status_kib("VmHWM", "VmRSS", "RssAnon", "RssFile", "RssShmem", pid=p.pid)
            if "VmHWM" not in st:
                continue
            hwm, rss = st["VmHWM"], st.get("VmRSS", 0)
            title = _title(p.pid)[:160]
            rec = self.procs.setdefault(p.pid, {"pid": p.pid, "title": title, "titles": [],
                                                "peak_gib": 0.0, "max_rss_gib": 0.0,
                                                "peak_private_gib": 0.0,
                                                "at_max_rss_gib": {}, "parents": []})
            if title not in rec["titles"]:
                rec["titles"].append(title)  # Ray renames a worker: ray::IDLE, ray::LearnerRank...
            private = (st.get("RssAnon", 0) + st.get("RssFile", 0)) * 1024 / GiB
            rec["peak_private_gib"] = max(rec["peak_private_gib"], private)
            if rss * 1024 / GiB > rec["max_rss_gib"]:
                rec["at_max_rss_gib"] = {k: v * 1024 / GiB for k, v in st.items()
                                         if k.startswith("Rss")}
            if not rec["parents"]:
                try:
                    rec["parents"] = [q.pid for q in p.parents()]
                except psutil.NoSuchProcess:
                    pass
            rec["peak_gib"] = max(rec["peak_gib"], hwm * 1024 / GiB)
            rec["max_rss_gib"] = max(rec["max_rss_gib"], (rss or 0) * 1024 / GiB)

    def by_role(self, log_text: str = "") -> list[dict[str, Any]]:
        """Every process with its role: from the titles Ray gave it (a sample may only have seen
        ``ray::IDLE``), else from the log's ``(LearnerRank pid=N)`` prefixes."""
        logged = {int(pid): cls for cls, pid in _LOG_PID.findall(log_text)}

        def names(pid: int) -> list[str]:
            rec = self.procs[pid]
            return [*rec["titles"], rec["title"], f"ray::{logged[pid]}" if pid in logged else ""]

        out = []
        for pid, rec in self.procs.items():
            ancestors = [t for q in rec["parents"] if q in self.procs for t in names(q)]
            own = " ".join(names(pid))
            out.append({**rec, "role": role_of(own, ancestors)})
        return sorted(out, key=lambda r: -r["peak_gib"])


_LOG_PID = re.compile(r"\((\w+) pid=(\d+)\)")


def estimate(overrides: list[str]) -> dict[str, Any]:
    from ragen2.cluster import host_memory as hm
    from ragen2.cluster.host import host_memory
    from ragen2.compose import load_config

    cfg, host = load_config(overrides), host_memory()
    b = hm.estimate_host_memory(cfg, host) if host is not None else None
    if b is None:  # unknown model shape, or /proc/meminfo unreadable
        return {}
    return {"learner_rank": b.learner_peak / GiB, "ranks": b.ranks,
            "engine_worker": b.engine_peak / GiB, "workers": b.workers,
            "shared": sum(b.shared.values()) / GiB, "need": b.need / GiB, "room": b.room / GiB,
            "plan": {"learner.micro_batch_tokens": cfg.learner.micro_batch_tokens,
                     "learner.activation_checkpointing": cfg.learner.activation_checkpointing,
                     "model.dtype": cfg.model.dtype,
                     "engine.hf_max_batch": cfg.engine.hf_max_batch},
            "describe": b.describe()}


def _available_kib() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1])
    return 0


def report(args: argparse.Namespace, est: dict[str, Any], sampler: TreeSampler, log_text: str,
           run: dict[str, Any]) -> dict[str, Any]:
    """The JSON document: per role, every process's peak, the estimate's ratios."""
    procs = sampler.by_role(log_text)
    roles: dict[str, dict[str, Any]] = {}
    for r in procs:
        d = roles.setdefault(r["role"], {"processes": 0, "max_peak_gib": 0.0, "sum_peak_gib": 0.0,
                                         "max_private_gib": 0.0, "sum_private_gib": 0.0})
        d["processes"] += 1
        d["max_peak_gib"] = max(d["max_peak_gib"], r["peak_gib"])
        d["sum_peak_gib"] += r["peak_gib"]
        private = r.get("peak_private_gib", r["peak_gib"])
        d["max_private_gib"] = max(d["max_private_gib"], private)
        d["sum_private_gib"] += private
    # an engine worker's estimate covers the worker and what it spawns (vLLM's engine core)
    workers = max(1, est.get("workers", 1))
    engine_tree = roles.get("engine", {}).get("sum_peak_gib", 0.0) / workers
    engine_private = roles.get("engine", {}).get("sum_private_gib", 0.0) / workers
    ratios = {}
    # VmHWM counts the object store's shared pages a process maps (the weights of a sync, counted
    # once in the estimate's shared terms); "private" is anonymous + file-backed memory only
    if est and "learner" in roles:
        ratios["learner_estimate_over_peak"] = est["learner_rank"] / roles["learner"]["max_peak_gib"]
        ratios["learner_estimate_over_private_peak"] = (
            est["learner_rank"] / roles["learner"]["max_private_gib"])
    if est and "engine" in roles:
        ratios["engine_estimate_over_peak"] = est["engine_worker"] / engine_tree
        ratios["engine_estimate_over_private_peak"] = est["engine_worker"] / engine_private
    if est and run.get("host_used_gib"):
        ratios["need_over_host_used"] = est["need"] / run["host_used_gib"]
    return {"benchmark": "job_memory", "name": args.name, "machine": machine(),
            "command": "ragen2-train " + " ".join(args.overrides), **run,
            "sampling_s": args.every, "estimate_gib": est, "roles": roles,
            "engine_worker_tree_gib": engine_tree,
            "engine_worker_tree_private_gib": engine_private, "ratios": ratios, "processes": procs}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--name", required=True, help="results/job_memory/<name>.json")
    ap.add_argument("--every", type=float, default=0.5, help="sampling interval, seconds")
    ap.add_argument("--out-dir", default=str(RESULTS / "job_memory"))
    ap.add_argument("--resummarise", action="store_true",
                    help="recompute <name>.json's roles and ratios from its processes and log")
    ap.add_argument("overrides", nargs="*", help="ragen2-train overrides (after --)")
    args = ap.parse_args()
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    log_path, json_path = out / f"{args.name}.log", out / f"{args.name}.json"
    if args.resummarise:
        old = json.loads(json_path.read_text())
        args.overrides = old["command"].split()[1:]
        sampler = TreeSampler(0)
        sampler.procs = {p["pid"]: {"titles": [], **{k: v for k, v in p.items() if k != "role"}}
                         for p in old["processes"]}
        run = {k: old[k] for k in ("returncode", "wall_s", "host_used_gib") if k in old}
        doc = report(args, old["estimate_gib"], sampler, log_path.read_text(errors="replace"), run)
        doc["machine"] = old["machine"]
    else:
        est = estimate(args.overrides)
        exe = shutil.which("ragen2-train") or str(Path(sys.executable).parent / "ragen2-train")
        avail0 = low = _available_kib()
        t0 = time.perf_counter()
        with open(log_path, "w") as log:
            proc = subprocess.Popen([exe, *args.overrides], stdout=log, stderr=subprocess.STDOUT)
            sampler = TreeSampler(proc.pid)
            while proc.poll() is None:
                sampler.sample()
                low = min(low, _available_kib())
                time.sleep(args.every)
        # what the whole job took from the machine at its low point (shared pages counted once;
        # also anything else that grew meanwhile)
        run = {"returncode": proc.returncode, "wall_s": time.perf_counter() - t0,
               "host_used_gib": (avail0 - low) * 1024 / GiB}
        doc = report(args, est, sampler, log_path.read_text(errors="replace"), run)
    json_path.write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps({k: doc.get(k) for k in ("command", "returncode", "wall_s", "host_used_gib",
                                              "roles", "ratios")}, indent=1))
    est = doc["estimate_gib"]
    if est:
        print(f"estimate: learner rank {est['learner_rank']:.2f} GiB x {est['ranks']}, engine worker "
              f"{est['engine_worker']:.2f} GiB x {est['workers']}, shared {est['shared']:.2f}, "
              f"need {est['need']:.2f} of {est['room']:.2f} GiB")
    return int(doc["returncode"] or 0)


if __name__ == "__main__":
    raise SystemExit(main())
