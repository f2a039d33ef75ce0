"""docs/reference/env-protocol.md: what serving the env over HTTP costs the default job
(``benchmarks/remote_env.py``, issue 49, item 4)."""

from __future__ import annotations

from typing import Any

from .account import _secs
from .data import ROOT, load, table

DOC = "benchmarks/results/remote_env.json"


def _entry(path: str, mode: str) -> dict[str, Any] | None:
    """The results file's entry for ``mode`` (``job``, ``latency``); None before it is measured."""
    return load(path).get(mode) if (ROOT / path).exists() else None


def _pending(mode: str) -> str:
    return (f"**Not measured yet**: `benchmarks/results/remote_env.json` has no `{mode}` entry "
            f"(`python benchmarks/remote_env.py{'' if mode == 'job' else ' ' + mode}`).")


def _ratio(x: float | None) -> str:
    return "—" if x is None else f"{x:.3f}"


def remote_env_job(path: str = DOC) -> str:
    """The whole default job in-process (local) and with its env served (remote), run by run in
    the order A B B A: wall time, median RL step and env seconds per step, HTTP requests per step
    request, held-out success, the other load; then the remote / local ratios of the median wall
    and step against the issue's goal, and the per-step overhead."""
    d = _entry(path, "job")
    if d is None:
        return _pending("job")
    s, runs = d["summary"], d["runs"]
    rows = []
    for r in runs:
        st = r.get("steps") or {}
        held = "—" if r.get("gain") is None else f"{r['before']:.3f} -> {r['after']:.3f}"
        per = r.get("requests_per_step_request")
        rows.append([f"{r['round'] + 1}", r["arm"],
                     "exit 0" if r["returncode"] == 0 else f"**exit {r['returncode']}**",
                     _secs(r["wall_s"]), _secs(st.get("step_s")), _secs(st.get("env_s")),
                     _secs(st.get("generate_s")), _secs(st.get("warm_start_s")),
                     "—" if per is None else f"{per:.2f}",
                     "—" if r["arm"] == "local" else _secs(r.get("server_cpu_s")), held,
                     f"{r['foreign_cores']:.2f}"])
    head = ["round", "env", "", "wall", "median RL step", "env per step", "generation per step",
            "warm start", "requests per step request", "server CPU", "held-out success",
            "other load (cores)"]
    ratio, step, over = s.get("wall_ratio"), s.get("step_ratio"), s.get("step_overhead_s")
    said = ("not measured yet (an arm has no finished run)" if ratio is None else
            f"**{ratio:.3f}** (per round {', '.join(_ratio(x) for x in s['pair_wall_ratios'])}; "
            f"the goal {d['goal']['wall_ratio']}: "
            f"{'met' if ratio <= float(d['goal']['wall_ratio'].split()[-1]) else 'not met'})")
    m = d["machine"]
    return table(head, rows) + (
        f"\n\nThe default job at `{d.get('commit') or 'an unrecorded commit'}` "
        f"(`{' '.join(d['settings']['overrides'])}`) on {m['cpu']} "
        f"({m['cpus']} cores), {len(d['settings']['order'])} runs in the order "
        f"{' '.join(d['settings']['order'])}, each remote run with its own `ragen2 serve-env` on "
        f"this machine: remote / local of the median wall times {said}"
        + ("" if step is None else
           f"; of the median RL step {step:.3f} ({over:+.3f} s a step)") + ".")


def remote_env_latency(path: str = DOC) -> str:
    """One client, one thread, no training: microseconds per reset and per turn in-process and
    over HTTP (the grounding verdict carried by the step, or asked first)."""
    d = _entry(path, "latency")
    if d is None:
        return _pending("latency")
    names = {"local": "in-process",
             "remote_ground_with_step": "HTTP, verdict with the step (one request a turn)",
             "remote_ground_first": "HTTP, `/hook/ground` first (two requests a turn)"}
    rows = [[names.get(k, k), f"{v['reset_us']:,.0f} µs", f"{v['turn_us']:,.0f} µs",
             "1" if k == "local" else f"{d['ratios'][k]:.1f}"]
            for k, v in d["results"].items()]
    return table(["how", "reset", "turn", "turn / in-process"], rows) + (
        f"\n\nFrozenLake, {d['settings']['turns']:,} turns an arm on {d['machine']['cpu']} "
        f"(medians).")
