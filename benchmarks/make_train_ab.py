"""``make train`` on two commits, back to back, each run from a fresh clone with empty caches
(issue 44's done-condition: the default job at <= 0.5x the wall time of the commit before the
speed work, both timed on one machine in one sitting).

Each side is a clone of this repository at its commit (``--base``, ``--head``) under
``--work-dir``, its venv built once by ``make setup`` (not timed: a newcomer builds it once, and
both sides install the same wheels). Every run then types the README's command in its clone,
``make train ARGS="hydra.run.dir=<run> <the side's --a-args / --b-args>"``, with every cache empty
and private to that run, as CI empties them (``RAGEN2_CACHE``: the tiny model and its tokenizer,
built offline on first use, and the warm start; ``XDG_CACHE_HOME``, ``VLLM_CACHE_ROOT``,
``TORCHINDUCTOR_CACHE_DIR``, ``TRITON_CACHE_DIR``). The sides run A B B A ... (``--rounds``
pairs; round r is (A, B) when r is even, (B, A) when odd), so a drift of the machine's speed hits
both. Per run: the command's wall time and the other load on the machine meanwhile
(``foreign_cores``, :func:`common.run_watched`), the medians of the RL steps' ``timing/*``, the
warm start's seconds, held-out success before and after RL (``summary.json``). Reported: each
side's median wall time, ``wall_ratio`` = median B / median A (the issue's goal: <= 0.5), the
per-round ratios, and each side's gains (a speed-up that stops learning is none).

A finished run is kept in the JSON: rerunning the same command (same commits, arguments and
rounds) skips the runs already recorded and continues the order where it stopped; other settings
are refused rather than mixed in.

Usage::

    python benchmarks/make_train_ab.py --base 7fe5491            # A B: ~2 x 15-20 min on 2 cores
    python benchmarks/make_train_ab.py --base 7fe5491 --rounds 2 # A B B A
    python benchmarks/make_train_ab.py --base HEAD --head HEAD --b-args learner.micro_batch_tokens=8192

Writes ``benchmarks/results/make_train_ab.json`` (``--name`` changes the file name). Run nothing
else meanwhile.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any, Sequence

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import common  # noqa: E402
from remote_env import read_rows, step_medians  # noqa: E402

ROOT = HERE.parent
A, B = "A", "B"
#: the issue's goal for the whole job, B (after the cuts) over A (before)
GOAL = {"wall_ratio": "<= 0.5"}
#: the caches a run starts without (CI's list, .ci/run), each a folder of the run's own
CACHE_VARS = {"RAGEN2_CACHE": "ragen2", "XDG_CACHE_HOME": "xdg", "VLLM_CACHE_ROOT": "vllm",
              "TORCHINDUCTOR_CACHE_DIR": "inductor", "TRITON_CACHE_DIR": "triton"}


# ---------------------------------------------------------------------- pure parts
def side_order(rounds: int) -> list[tuple[int, str]]:
    """(round, side) in the order they run: A B, then B A, then A B, ..."""
    if rounds < 1:
        raise ValueError(f"--rounds must be >= 1, got {rounds}")
    return [(r, side) for r in range(rounds) for side in ((A, B) if r % 2 == 0 else (B, A))]


def make_args(run_dir: Path, extra: Sequence[str]) -> str:
    """The ``ARGS`` value of ``make train`` for one run: its run folder, then the side's
    overrides, each quoted for the shell the Makefile's recipe runs in."""
    return " ".join(shlex.quote(a) for a in (f"hydra.run.dir={run_dir}", *extra))


def _median(xs: Sequence[float | None]) -> float | None:
    vals = [float(x) for x in xs if isinstance(x, (int, float))]
    return statistics.median(vals) if vals else None


def summarize(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per side the medians over its finished runs (exit 0): wall time, RL step, warm start,
    gain and foreign cores; ``wall_ratio`` and ``step_ratio`` (B's median over A's), and
    ``pair_wall_ratios`` (each round's B wall over its A wall, rounds with both finished)."""
    ok = [r for r in runs if r.get("returncode") == 0]
    out: dict[str, Any] = {"runs": len(runs), "failed": len(runs) - len(ok)}
    for side in (A, B):
        rs = [r for r in ok if r["side"] == side]
        out[side] = {"n": len(rs),
                     "wall_s": _median([r["wall_s"] for r in rs]),
                     "step_s": _median([r["steps"].get("step_s") for r in rs]),
                     "warm_start_s": _median([r["steps"].get("warm_start_s") for r in rs]),
                     "gain": _median([r["gain"] for r in rs]),
                     "gains": [r["gain"] for r in rs],
                     "foreign_cores": _median([r["foreign_cores"] for r in rs])}
    a, b = out[A], out[B]
    out["wall_ratio"] = b["wall_s"] / a["wall_s"] if a["wall_s"] and b["wall_s"] else None
    out["step_ratio"] = b["step_s"] / a["step_s"] if a["step_s"] and b["step_s"] else None
    out["pair_wall_ratios"] = common.round_ratios(ok, "side", B, A)
    return out


def kept_runs(previous: dict[str, Any] | None, settings: dict[str, Any]) -> list[dict[str, Any]]:
    """The finished runs of an earlier invocation with the same settings (to continue it); a
    document with other settings is refused, never mixed in."""
    if not previous:
        return []
    if previous.get("settings") != settings:
        raise SystemExit("make_train_ab: the results file holds runs with other settings "
                         f"({previous.get('settings')}); pass --name for a new file or remove it")
    return [r for r in previous.get("runs", []) if r.get("returncode") == 0]


# ---------------------------------------------------------------------- the runs
def git(*args: str, cwd: Path = ROOT) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                          text=True).stdout.strip()


def checkout(work: Path, side: str, rev: str) -> Path:
    """A clone of this repository at ``rev`` with its venv built (``make setup``, untimed)."""
    sha = git("rev-parse", "--verify", f"{rev}^{{commit}}")
    path = work / f"{side}_{sha[:7]}"
    if not (path / ".git").exists():
        subprocess.run(["git", "clone", "-q", "--no-checkout", str(ROOT), str(path)], check=True)
    subprocess.run(["git", "checkout", "-q", "--detach", sha], cwd=path, check=True)
    print(f"  side {side}: {sha[:7]} in {path}: make setup (untimed)", flush=True)
    subprocess.run(["make", "setup"], cwd=path, check=True, stdout=subprocess.DEVNULL)
    return path


def one_run(side: str, rnd: int, clone: Path, extra: Sequence[str], work: Path) -> dict[str, Any]:
    """``make train`` in ``clone`` with every cache empty; its record."""
    name = f"{rnd}_{side}"
    run_dir, cache = work / "runs" / name, work / "cache" / name
    for d in (run_dir, cache):
        shutil.rmtree(d, ignore_errors=True)
    env = dict(os.environ)
    for var, sub in CACHE_VARS.items():
        (cache / sub).mkdir(parents=True)
        env[var] = str(cache / sub)
    args = make_args(run_dir, extra)
    watched = common.run_watched(["make", "train", f"ARGS={args}"], work / f"{name}.log",
                                 env=env, cwd=clone)
    summary_path = run_dir / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    before, after = summary.get("eval_before"), summary.get("eval_after")
    rec = {"side": side, "round": rnd, "commit": git("rev-parse", "HEAD", cwd=clone)[:7],
           "command": f'make train ARGS="{args}"', **watched,
           "steps": step_medians(read_rows(run_dir)), "before": before, "after": after,
           "gain": None if before is None or after is None else after - before}
    print(f"  round {rnd} side {side} ({rec['commit']}): exit {rec['returncode']}, "
          f"{rec['wall_s']:.0f} s, step {rec['steps'].get('step_s', float('nan')):.2f} s, "
          f"gain {rec['gain']}, foreign cores {rec['foreign_cores']:.2f}", flush=True)
    shutil.rmtree(cache, ignore_errors=True)
    return rec


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--base", required=True, help="side A's commit (before the change)")
    p.add_argument("--head", default="HEAD", help="side B's commit (default: HEAD)")
    p.add_argument("--a-args", nargs="*", default=[], help="side A's overrides for make train")
    p.add_argument("--b-args", nargs="*", default=[], help="side B's overrides for make train")
    p.add_argument("--rounds", type=int, default=1, help="pairs: 1 = A B, 2 = A B B A, ...")
    p.add_argument("--work-dir", default="/tmp/ragen2_make_train_ab")
    p.add_argument("--name", default="make_train_ab")
    args = p.parse_args()
    order = side_order(args.rounds)
    work = Path(args.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    revs = {A: git("rev-parse", "--verify", f"{args.base}^{{commit}}"),
            B: git("rev-parse", "--verify", f"{args.head}^{{commit}}")}
    extra = {A: list(args.a_args), B: list(args.b_args)}
    settings = {"commits": {s: r[:7] for s, r in revs.items()}, "args": extra,
                "rounds": args.rounds, "order": [f"{r}{s}" for r, s in order]}
    out = HERE / "results" / f"{args.name}.json"
    runs = kept_runs(json.loads(out.read_text()) if out.exists() else None, settings)
    done = {(r["round"], r["side"]) for r in runs}
    clones = {s: checkout(work, s, revs[s]) for s in (A, B)}
    doc = {"benchmark": "make_train_ab", "machine": common.machine(), "settings": settings,
           "goal": GOAL}
    for rnd, side in order:
        if (rnd, side) in done:
            continue
        runs.append(one_run(side, rnd, clones[side], extra[side], work))
        doc.update({"runs": runs, "summary": summarize(runs)})
        out.write_text(json.dumps(doc, indent=1) + "\n")
    s = summarize(runs)
    print(f"  A {settings['commits'][A]}: {s[A]['wall_s']} s; B {settings['commits'][B]}: "
          f"{s[B]['wall_s']} s; wall_ratio {s['wall_ratio']} (goal {GOAL['wall_ratio']}); "
          f"per round {s['pair_wall_ratios']}", flush=True)


if __name__ == "__main__":
    main()
