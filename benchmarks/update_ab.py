"""One learner update, before and after a change: two checkouts of ragen2 timed alternately on the
same synthetic batch (issue 44, item 2: each cut of the update is measured this way).

The batch is shaped like a finished run's (``--run DIR``: its median batch, as
``step_account.py --profile-update`` builds it), the update is ``LearnerRank.update`` in
``cluster.learner_world_size`` spawned processes over gloo, outside Ray. Side A imports ragen2 from
``--base`` (a checkout of the commit before the change, e.g. ``git worktree add /tmp/base
HEAD~1``), side B from this checkout (or ``--head``); the harness (``step_account.py``) is this
checkout's for both. The sides alternate A B A B ... (``--rounds`` pairs; each round times
``--repeats`` updates after one warm-up and keeps their median), so a drift of the machine's speed
hits both. Reported: each side's median over rounds, the ratio B / A of the medians, and the
per-round ratios.

Usage::

    python benchmarks/update_ab.py --base /tmp/base --run outputs/step_account/<time> [--rounds 3]

Writes ``benchmarks/results/update_ab.json`` (``--name`` changes the file name). Run nothing else
meanwhile.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import common  # noqa: E402


def one_side(checkout: Path, run_dir: Path, repeats: int, out: Path) -> None:
    """In a child process: profile the update of the run's batch with ``checkout``'s ragen2
    (first on sys.path: ``common`` put this checkout there; spawned ranks inherit sys.path)."""
    sys.path.insert(0, str(checkout))
    import step_account as sa
    from ragen2.train import load_config, resolve_model_path

    overrides = sa.run_overrides(run_dir, [])
    cfg = load_config(overrides)
    s = sa.job_settings(cfg)
    model_path = resolve_model_path(cfg)
    shape = sa.model_shape(model_path)
    rows = sa.read_metrics(run_dir / "metrics.jsonl")
    ceilings = {"matmul": {}, "bandwidth": {}}  # the floors are not needed here
    account = sa.build_account(rows, s, shape, ceilings)
    used = account["steps_used"]
    turns = sa._median_over(rows, used, lambda r: sa._num(r, "rollout/num_turns_mean")) or 1.0
    spec = sa.batch_spec(sa.Tokens(**account["tokens"]["update"]), turns, s["group_size"],
                         s["max_turns"], sa.first_prompt_tokens(run_dir, model_path, used))
    prof = sa.profile_update(overrides, spec, s, model_path, shape.vocab, repeats)
    import ragen2

    out.write_text(json.dumps({"update_s": prof["update_s"], "phases_s": prof["phases_s"],
                               "batch": spec, "ragen2": str(Path(ragen2.__file__).parent)}))


def main() -> None:
    def extra(ap: Any) -> None:
        ap.add_argument("--base", required=True, help="checkout of side A (the commit before)")
        ap.add_argument("--head", default=str(common.ROOT),
                        help="checkout of side B (the commit after; default this one)")
        ap.add_argument("--run", required=True, help="a finished run whose batch is timed")
        ap.add_argument("--rounds", type=int, default=3, help="A B pairs")
        ap.add_argument("--repeats", type=int, default=3, help="timed updates per side and round")
        ap.add_argument("--name", default="update_ab", help="the result file's name")
        ap.add_argument("--side", nargs=2, default=None, metavar=("CHECKOUT", "JSON"),
                        help="internal: time one side with CHECKOUT's ragen2, write JSON")

    args = common.parse_args(__doc__, extra)
    run_dir = Path(args.run).resolve()
    if args.side:
        one_side(Path(args.side[0]), run_dir, args.repeats, Path(args.side[1]))
        return
    base = Path(args.base).resolve()
    if not (base / "ragen2" / "__init__.py").exists():
        raise SystemExit(f"--base {base}: no ragen2/ package there (a checkout of the repository)")
    head = Path(args.head).resolve()
    sides = {"A": base, "B": head}
    times: dict[str, list[float]] = {"A": [], "B": []}
    seen: dict[str, str] = {}
    for r in range(args.rounds):
        for side in ("A", "B"):
            with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
                out = Path(f.name)
            cmd = [sys.executable, __file__, "--base", str(base), "--run", str(run_dir),
                   "--repeats", str(args.repeats), "--side", str(sides[side]), str(out)]
            subprocess.run(cmd, check=True, cwd=common.ROOT)
            got = json.loads(out.read_text())
            out.unlink()
            seen[side] = got["ragen2"]
            times[side].append(got["update_s"])
            print(f"round {r + 1} {side} ({got['ragen2']}): update {got['update_s']:.3f} s",
                  flush=True)
    for side, path in sides.items():  # each side imported the checkout it was given
        if Path(seen[side]).resolve() != (path / "ragen2").resolve():
            raise SystemExit(f"side {side} imported ragen2 from {seen[side]}, not {path}")
    med = {k: statistics.median(v) for k, v in times.items()}
    per_round = [b / a for a, b in zip(times["A"], times["B"])]
    results = {"A": {"checkout": str(base), "commit": common.git_commit(base),
                     "update_s": times["A"], "median_s": med["A"]},
               "B": {"checkout": str(head), "commit": common.git_commit(head),
                     "update_s": times["B"], "median_s": med["B"]},
               "per_round_ratio": per_round}
    settings = {"run_dir": os.path.relpath(run_dir, common.ROOT), "rounds": args.rounds,
                "repeats": args.repeats}
    common.write_result(args.name, args, settings, results, {"b_over_a": med["B"] / med["A"]},
                        {"b_over_a": "lower"})


if __name__ == "__main__":
    main()
