"""An env served over HTTP against the same env in-process (issue 49, item 4).

Three modes, none part of ``run.py``:

* ``job`` (the default): the default job (``ragen2-train``, the command behind ``make train``)
  with FrozenLake in-process (arm ``local``) and with FrozenLake served by ``ragen2 serve-env`` on
  this machine (arm ``remote``: ``env.id=ragen2/Remote-v0 env.kwargs.url=<the server>``), in the
  order A B B A (``--rounds 2``; more rounds continue A B B A B A A B ...) so that a drift of the
  machine cancels. Each remote run starts its own server on a port the OS assigns (``--url-file``:
  nothing is picked first and bound later) and stops it after the run, reading its per-endpoint
  request counts (``GET /health``) and CPU time first. Both arms run with
  ``trainer.warm_start.cache=false``: the warm start's cache key holds the env's kwargs, the URL
  among them, so a remote run would never find the local run's cache; both build their own, the
  remote one with its demonstrations over HTTP. Per run: the whole command's wall time (the
  machine's other load beside it, as ``foreign_cores``), medians over the RL steps of
  ``timing/step_s``, ``rollout_s``, ``generate_s`` and ``env_s`` (``metrics.jsonl``), held-out
  success before and after. Reported: ``wall_ratio`` (median remote wall / median local wall;
  the issue's goal <= 1.15), ``step_ratio``, the per-step overhead in seconds, the env seconds per
  step, and HTTP requests per step request (1.0 when the grounding verdict travels with the
  step). About 4 x 15-20 minutes on 2 cores for the whole 40-step job.
* ``latency``: no training. One client against a served FrozenLake and the env in-process, one
  turn after another on one thread: microseconds per reset and per turn, the turn grounded with
  its step (one request) and grounded first (``/hook/ground`` then the step: two requests, the
  way a server without ``step_hooks`` is played). Seconds.
* ``seed-pairs``: the done-condition's learning check. Starts one server and runs
  ``benchmarks/robustness.py`` with the env over HTTP, the URL passed through the environment so
  that the label's overrides are the same in every sitting::

      python benchmarks/remote_env.py seed-pairs -- --label remote_http
      python benchmarks/robustness.py --report --label remote_http --against fast_v1 --bar near

  ``fast_v1``: the in-process label with the same settings at the same commit (today's default
  job); a label from another commit differs by more than the transport.

  which is, by hand (the server started first, its URL in ``RAGEN2_ENV_URL``)::

      RAGEN2_ENV_URL=http://127.0.0.1:PORT python benchmarks/robustness.py --label remote_http \\
          --set env.id=ragen2/Remote-v0 'env.kwargs.url=${oc.env:RAGEN2_ENV_URL}'

  Six runs of the committed seed pairs (warm-start seeds 0-2 x RL seeds 0-1), each with cold
  caches: 1.5-2 hours on 2 cores.

Usage::

    python benchmarks/remote_env.py                        # job: the whole default job, A B B A
    python benchmarks/remote_env.py --steps 10 --rounds 1  # a shorter look: 10 steps, A B
    python benchmarks/remote_env.py latency
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path
from typing import Any, Sequence

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import common  # noqa: E402  (benchmarks/common.py)

ROOT = HERE.parent
RESULTS = HERE / "results" / "remote_env.json"
ENV_ID = "ragen2/FrozenLake-v0"
LOCAL, REMOTE = "local", "remote"
#: per-step metrics whose medians over the RL steps each run reports
STEP_KEYS = ("timing/step_s", "timing/rollout_s", "timing/generate_s", "timing/env_s",
             "timing/update_s", "rollout/num_turns_mean")
#: the job's parts outside the steps' medians, summed over the run: the warm start, the
#: evaluations, the monitor's measurements and the probe panels
SUMMED_KEYS = ("timing/warm_start_s", "timing/eval_s", "timing/monitor_s", "timing/panel_s",
               "timing/panel_turns_s")
#: the issue's goal for the whole job's wall time, remote over local
GOAL = {"wall_ratio": "<= 1.15"}
#: the requests of a turn: its step, and the instruments a server may be asked for separately
TURN_REQUESTS = ("POST /step", "POST /hook/ground", "POST /hook/state_coordinates")


# ---------------------------------------------------------------------- pure parts
def arm_order(rounds: int) -> list[str]:
    """A B B A ...: round r runs (local, remote) when r is even, (remote, local) when odd."""
    return [arm for r in range(rounds)
            for arm in ((LOCAL, REMOTE) if r % 2 == 0 else (REMOTE, LOCAL))]


def read_rows(run_dir: Path) -> list[dict[str, Any]]:
    """The run's ``metrics.jsonl`` rows (a torn last line skipped)."""
    path = Path(run_dir) / "metrics.jsonl"
    rows = []
    for line in (path.read_text().splitlines() if path.exists() else []):
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


def step_medians(rows: Sequence[dict[str, Any]]) -> dict[str, float | int]:
    """Medians of :data:`STEP_KEYS` over the RL steps (the rows with ``timing/step_s``), their
    count as ``steps``, and the sums of :data:`SUMMED_KEYS` where the rows have them."""
    steps = [r for r in rows if "timing/step_s" in r]
    out: dict[str, float | int] = {"steps": len(steps)}
    for key in STEP_KEYS:
        xs = [float(r[key]) for r in steps if key in r]
        if xs:
            out[key.split("/", 1)[1]] = statistics.median(xs)
    for key in SUMMED_KEYS:
        xs = [float(r[key]) for r in rows if key in r]
        if xs:
            out[key.split("/", 1)[1]] = sum(xs)
    return out


def requests_per_step_request(counts: dict[str, int]) -> float | None:
    """The requests a turn costs, per step request: (steps + instruments asked separately) /
    steps. 1.0 when the verdict travels with the step; about 2.0 when ground is asked first."""
    steps = counts.get("POST /step", 0)
    return None if not steps else sum(counts.get(k, 0) for k in TURN_REQUESTS) / steps


def _median(runs: Sequence[dict[str, Any]], *path: str) -> float | None:
    xs = []
    for r in runs:
        v: Any = r
        for p in path:
            v = v.get(p) if isinstance(v, dict) else None
        if isinstance(v, (int, float)):
            xs.append(float(v))
    return statistics.median(xs) if xs else None


def summarize(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per arm the medians over its finished runs; remote over local: ``wall_ratio`` (whole
    command), ``step_ratio`` and ``step_overhead_s`` (median RL step), ``env_s_per_step`` of
    each arm, ``pair_wall_ratios`` (each remote run over the local run of its round), and
    ``requests_per_step_request`` (the remote runs' median)."""
    ok = [r for r in runs if r.get("returncode") == 0]
    arms = {arm: [r for r in ok if r["arm"] == arm] for arm in (LOCAL, REMOTE)}
    out: dict[str, Any] = {"runs": len(runs), "failed": len(runs) - len(ok)}
    for arm, rs in arms.items():
        out[arm] = {"n": len(rs), "wall_s": _median(rs, "wall_s"),
                    **{k: _median(rs, "steps", k) for k in
                       ("step_s", "rollout_s", "generate_s", "env_s", "warm_start_s", "eval_s")},
                    "gain": _median(rs, "gain"), "foreign_cores": _median(rs, "foreign_cores")}
    loc, rem = out[LOCAL], out[REMOTE]
    out["wall_ratio"] = (rem["wall_s"] / loc["wall_s"]
                         if rem["wall_s"] and loc["wall_s"] else None)
    out["step_ratio"] = (rem["step_s"] / loc["step_s"]
                         if rem["step_s"] and loc["step_s"] else None)
    out["step_overhead_s"] = (rem["step_s"] - loc["step_s"]
                              if rem["step_s"] is not None and loc["step_s"] is not None else None)
    out["env_s_per_step"] = {LOCAL: loc["env_s"], REMOTE: rem["env_s"]}
    out["pair_wall_ratios"] = common.round_ratios(ok, "arm", REMOTE, LOCAL)
    out["requests_per_step_request"] = _median(arms[REMOTE], "requests_per_step_request")
    return out


# ---------------------------------------------------------------------- the server
def start_server(work: Path, *args: str) -> tuple[subprocess.Popen, str]:
    """``ragen2 serve-env ENV_ID ARGS --url-file`` in a session of its own; (process, URL)."""
    url_file = work / f"env-{time.monotonic_ns()}.url"
    log = open(work / "serve.log", "a")
    proc = subprocess.Popen([sys.executable, "-m", "ragen2.cli", "serve-env", ENV_ID, *args,
                             "--url-file", str(url_file)], cwd=ROOT, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 300
    while not url_file.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            stop_server(proc)
            raise RuntimeError(f"ragen2 serve-env did not start: see {work / 'serve.log'}")
        time.sleep(0.2)
    return proc, url_file.read_text().strip()


def health(url: str) -> dict[str, Any]:
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    try:
        conn.request("GET", "/health")
        return json.loads(conn.getresponse().read())
    finally:
        conn.close()


def server_cpu_s(proc: subprocess.Popen) -> float:
    """CPU seconds of the server and its children so far."""
    import psutil

    try:
        p = psutil.Process(proc.pid)
        procs = [p, *p.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0.0
    total = 0.0
    for q in procs:
        try:
            t = q.cpu_times()
            total += t.user + t.system
        except psutil.NoSuchProcess:
            pass
    return total


def stop_server(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)
    except ProcessLookupError:
        pass
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


# ---------------------------------------------------------------------- job
def run_job(arm: str, rnd: int, overrides: list[str], work: Path) -> dict[str, Any]:
    """One ``ragen2-train`` run of ``arm``; its record."""
    run_dir = work / f"{rnd}_{arm}"
    cmd = [str(Path(sys.executable).with_name("ragen2-train")), *overrides,
           f"hydra.run.dir={run_dir}"]
    server, url = (start_server(work) if arm == REMOTE else (None, None))
    try:
        if url:
            cmd[1:1] = ["env.id=ragen2/Remote-v0", f"env.kwargs.url={url}"]
        watched = common.run_watched(cmd, work / f"{rnd}_{arm}.log", cwd=ROOT)
        counts = health(url).get("requests", {}) if url else {}
        cpu = server_cpu_s(server) if server else 0.0
    finally:
        if server is not None:
            stop_server(server)
    summary_path = run_dir / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    before, after = summary.get("eval_before"), summary.get("eval_after")
    rec = {"arm": arm, "round": rnd, "command": cmd[1:], **watched,
           # the server is no other load: its CPU is part of the remote arm's work
           "foreign_cores": max(0.0, watched["foreign_cpu_s"] - cpu) / max(watched["wall_s"], 1e-9),
           "server_cpu_s": cpu, "requests": counts,
           "requests_per_step_request": requests_per_step_request(counts),
           "steps": step_medians(read_rows(run_dir)), "before": before, "after": after,
           "gain": None if before is None or after is None else after - before}
    print(f"  round {rnd} {arm}: exit {rec['returncode']}, {rec['wall_s']:.0f} s, step "
          f"{rec['steps'].get('step_s', float('nan')):.2f} s, env "
          f"{rec['steps'].get('env_s', float('nan')):.3f} s"
          + (f", {rec['requests_per_step_request']} requests per step request" if url else ""),
          flush=True)
    return rec


def job(args: argparse.Namespace) -> None:
    overrides = ["trainer.warm_start.cache=false", *args.set]
    if args.steps:
        overrides.append(f"trainer.total_steps={args.steps}")
    work = Path(args.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    runs: list[dict[str, Any]] = []
    doc = {"benchmark": "remote_env", "mode": "job", "machine": common.machine(),
           "commit": common.git_commit(ROOT),
           "settings": {"overrides": overrides, "rounds": args.rounds,
                        "order": arm_order(args.rounds)}, "goal": GOAL}
    for i, arm in enumerate(arm_order(args.rounds)):
        runs.append(run_job(arm, i // 2, overrides, work))
        doc.update({"runs": runs, "summary": summarize(runs)})
        save(Path(args.out), "job", doc)
    s = doc["summary"]
    for k in ("wall_ratio", "step_ratio", "step_overhead_s", "requests_per_step_request"):
        v = s.get(k)
        print(f"  {k} = {'n/a' if v is None else f'{v:.3f}'}"
              + (f"  (goal {GOAL[k]})" if k in GOAL else ""), flush=True)
    print(f"  env_s per step: {s['env_s_per_step']}; pairs: {s['pair_wall_ratios']}", flush=True)


# ---------------------------------------------------------------------- latency
def latency(args: argparse.Namespace) -> None:
    """Microseconds per reset and per turn, in-process and over HTTP (one thread), each arm after
    a tenth of its turns as warm-up."""
    import gymnasium as gym

    import ragen2_envs  # noqa: F401  (registers the ids)

    reasoning = "I am at row 1, column 1. The goal is at row 4, column 4."
    actions = ["Down", "Right", "Up", "Left"]

    def play(env, turn, count: int) -> dict[str, float]:
        resets, turns, n, seed = [], [], 0, 0
        while n < count:
            t0 = time.perf_counter()
            env.reset(seed=seed)
            resets.append(time.perf_counter() - t0)
            seed += 1
            for k in range(8):
                t0 = time.perf_counter()
                done = turn(env, actions[(seed + k) % 4])
                turns.append(time.perf_counter() - t0)
                n += 1
                if done:
                    break
        return {"reset_us": 1e6 * statistics.median(resets),
                "turn_us": 1e6 * statistics.median(turns), "turns": len(turns)}

    def local_turn(env, action) -> bool:
        env.unwrapped.ground(reasoning)
        return any(env.step(action)[2:4])

    def with_step(env, action) -> bool:
        inner = env.unwrapped
        inner.ground_with_step(reasoning)
        out = env.step(action)
        inner.ground(reasoning)
        return any(out[2:4])

    work = Path(tempfile.mkdtemp(prefix="remote-env-latency-"))
    server, url = start_server(work)
    try:
        envs = {"local": gym.make(ENV_ID), "remote": gym.make("ragen2/Remote-v0", url=url)}
        arms = {"local": (envs["local"], local_turn),
                "remote_ground_with_step": (envs["remote"], with_step),
                "remote_ground_first": (envs["remote"], local_turn)}  # /hook/ground, then step
        for env, turn in arms.values():  # warm-up: connections, first-call costs
            play(env, turn, max(args.turns // 10, 10))
        results = {name: play(env, turn, args.turns) for name, (env, turn) in arms.items()}
        envs["remote"].close()
        counts = health(url).get("requests", {})
    finally:
        stop_server(server)
    base = results["local"]["turn_us"]
    doc = {"benchmark": "remote_env", "mode": "latency", "machine": common.machine(),
           "settings": {"turns": args.turns}, "results": results, "requests": counts,
           "ratios": {k: v["turn_us"] / base for k, v in results.items() if k != "local"}}
    for k, v in results.items():
        print(f"  {k}: reset {v['reset_us']:.0f} us, turn {v['turn_us']:.0f} us", flush=True)
    save(Path(args.out), "latency", doc)


# ---------------------------------------------------------------------- seed pairs
def seed_pairs(args: argparse.Namespace) -> int:
    """``robustness.py`` with the env served over HTTP (``--set`` the remote env, its URL from
    ``RAGEN2_ENV_URL``), ``args.rest`` passed on (``--label`` first among them)."""
    work = Path(tempfile.mkdtemp(prefix="remote-env-seeds-"))
    server, url = start_server(work)
    try:
        cmd = [sys.executable, str(HERE / "robustness.py"), *args.rest, "--set",
               "env.id=ragen2/Remote-v0", "env.kwargs.url=${oc.env:RAGEN2_ENV_URL}", *args.set]
        print(f"serving {ENV_ID} at {url}; {' '.join(cmd[1:])}", flush=True)
        rc = subprocess.run(cmd, cwd=ROOT, env={**os.environ, "RAGEN2_ENV_URL": url}).returncode
        print(f"the server answered {health(url).get('requests', {})}", flush=True)
        return rc
    finally:
        stop_server(server)


# ---------------------------------------------------------------------- results
def save(path: Path, key: str, doc: dict[str, Any]) -> None:
    """``doc`` as entry ``key`` of the results file (the other mode's entry kept)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    whole = json.loads(path.read_text()) if path.exists() else {}
    whole[key] = doc
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(whole, indent=1) + "\n")
    os.replace(tmp, path)
    print(f"wrote {path} ({key})", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", nargs="?", default="job", choices=("job", "latency", "seed-pairs"),
                    help="seed-pairs: robustness.py's own arguments follow a --")
    ap.add_argument("--steps", type=int, default=0,
                    help="job: trainer.total_steps (default 0: the default job's own, 40)")
    ap.add_argument("--rounds", type=int, default=2, help="job: A B rounds (2: A B B A)")
    ap.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                    help="ragen2-train overrides for both arms (seed-pairs: for robustness.py)")
    ap.add_argument("--turns", type=int, default=2000, help="latency: turns per arm")
    ap.add_argument("--work-dir", default=str(ROOT / "outputs" / "remote_env"))
    ap.add_argument("--out", default=str(RESULTS))
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    args = ap.parse_args(argv[:cut])
    args.rest = argv[cut + 1:]
    if args.mode == "seed-pairs":
        if "--set" in args.rest:
            ap.error("give robustness.py's overrides with this script's --set (robustness.py "
                     "keeps only one --set)")
        return seed_pairs(args)
    if args.rest:
        ap.error(f"arguments after -- ({args.rest}) are robustness.py's: seed-pairs only")
    (latency if args.mode == "latency" else job)(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
