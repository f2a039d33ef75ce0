"""Blocks from ``benchmarks/results/step_account.json`` (``benchmarks/step_account.py``, issue 44):
one step's phases against their floors on this machine, the whole job in parts, and the profiled
update. Each block takes the document's path (from the repository root) as its one optional
argument, so a page can show another sitting's account."""

from __future__ import annotations

from pathlib import Path

from .data import load, pct, table

DOC = "benchmarks/results/step_account.json"
TOP_OPS = 6  # operators listed from the profile


def _secs(x: float | None) -> str:
    """``11.90 s``, ``0.043 s``, ``2.1e-4 s``; ``—`` when there is none."""
    if x is None:
        return "—"
    if x == 0:
        return "0 s"
    if x >= 1:
        return f"{x:,.2f} s"
    return f"{x:.3f} s" if x >= 0.001 else f"{x:.1e} s"


def _times(x: float | None) -> str:
    if x is None:
        return "—"
    return f"{x:,.0f}x" if x >= 10 else f"{x:.1f}x"


def _share(x: float | None) -> str:
    return "" if x is None else pct(x)


def _machine(d: dict) -> str:
    """The machine a result was measured on, e.g. ``AMD EPYC (2 cores)``."""
    m = d.get("machine") or {}
    return f"{m.get('cpu') or 'an unnamed CPU'} ({m.get('cpus', '?')} cores)"


def step_account_phases(path: str = DOC) -> str:
    """The machine's ceilings, then per phase of a step (and the loop's evaluations and panels)
    the median seconds over the steps used, its share of the summed step time, its floor, what
    bounds the floor and how far above it the phase runs."""
    d = load(path)
    r, s = d["results"], d["settings"]["job_settings"]
    used, peaks = r["steps_used"], r["peaks_used"]
    command = " ".join(d["settings"]["overrides"])
    commit = d["settings"].get("commit")
    intro = (f"Measured on {_machine(d)}" + (f" at `{commit}`" if commit else "") + ", "
             f"`model.dtype={peaks['dtype']}`: matmul peak "
             f"{peaks['learner_flops_per_s'] / 1e9:,.0f} GFLOP/s over the "
             f"{s['world_size']} learner rank(s) at {s['learner_threads']} thread(s) each, "
             f"{peaks['worker_flops_per_s'] / 1e9:,.0f} GFLOP/s for the rollout worker(s) at "
             f"{s['worker_threads']} thread(s); memory traffic "
             f"{peaks['learner_traffic_bytes_per_s'] / 1e9:,.1f} GB/s. Medians over steps "
             f"{used[0]}-{used[-1]} ({len(used)} steps) of "
             + (f"the default job with `{command}`." if command else "the default job."))
    rows = []
    for p in r["phases"]:
        where = {"step": "", "loop": " (outside the step)"}.get(p["where"], "")
        rows.append([f"{p['name']}{where}", str(p["n"]), _secs(p["median_s"]),
                     _share(p.get("share_of_step")), _secs(p.get("floor_s")),
                     p.get("bound") or "—", _times(p.get("over_floor"))])
    missing = ", ".join(f"`{k}`" for k in r["not_timed"])
    notes = "\n".join(f"- {p['name']}: {'; '.join(p['notes'])}."
                      for p in r["phases"] if p.get("notes"))
    return (intro + "\n\n"
            + table(["phase", "runs", "median", "share of step", "floor", "bound", "x floor"],
                    rows)
            + (f"\n\n{notes}" if notes else "")
            + f"\n\nNot timed by ragen2 today: {missing} (the untimed rows are differences of the "
              "timed ones).")


def step_account_job(path: str = DOC) -> str:
    """The whole job in parts: seconds and share of the job's wall time."""
    d = load(path)
    job = d["results"]["job"]
    shares = job.get("shares") or {}
    rows = [[name, _secs(v), _share(shares.get(name))] for name, v in job["parts"].items()]
    wall = job["process_wall_s"] if job["process_wall_s"] is not None else job["run_wall_s"]
    whole = "the `ragen2-train` process" if job["process_wall_s"] is not None else "the run"
    ws = job.get("warm_start_floor") or {}
    line = (f"The whole job: {_secs(wall)} ({whole}), {job['steps']} RL steps."
            if wall is not None else f"The whole job: {job['steps']} RL steps (no wall time).")
    if ws.get("floor_s"):
        line += (f" The warm start's floor: {_secs(ws['floor_s'])}"
                 + (f"; it took {_times(ws['over_floor'])} that" if ws.get("over_floor")
                    else "") + f" ({ws['note']}).")
    return line + "\n\n" + table(["part", "seconds", "share of the job"], rows)


def step_account_update(path: str = DOC) -> str:
    """The profiled update: its sub-phases (unprofiled medians) and where one profiled update's
    time went."""
    d = load(path)
    prof = d["results"].get("update_profile")
    if not prof:
        return ("The update was not profiled in this sitting (`python benchmarks/step_account.py "
                "--profile-update`).")
    if "error" in prof:
        return "The update's profile failed in this sitting (`update_profile.error`)."
    b = prof["batch"]
    intro = (f"One update outside Ray: {prof['world_size']} gloo rank(s) at "
             f"{prof['threads_per_rank']} thread(s) each, a synthetic batch of {b['rows']} rows "
             f"in groups of {b['group_size']} (first prompt {b['prompt_tokens']} tokens, "
             f"{b['turns_mean']:.1f} turns of {b['reply_tokens']} reply tokens) "
             f"({prof.get('batch_note', '')}): {_secs(prof['update_s'])} (median of "
             f"{prof['repeats']})"
             + (f"; the job's update: {_secs(prof['job_update_median_s'])}."
                if prof.get("job_update_median_s") is not None else "."))
    total = sum(prof["phases_s"].values())  # rank 0's medians: its update, "other" the rest
    phases = table(["sub-phase (rank 0)", "seconds", "share"],
                   [[k, _secs(v), pct(v / total) if total else ""]
                    for k, v in prof["phases_s"].items()])
    pr = prof["profiled"]
    cats = table(["where the profiled update's time went", "seconds", "share"],
                 [[k, _secs(v), pct(v / pr["wall_s"]) if pr["wall_s"] else ""]
                  for k, v in pr["categories_s"].items()])
    top = table(["the profiled update's largest operators (rank 0)", "calls", "self seconds",
                 "share"],
                [[f"`{o['name']}`", str(o["calls"]), _secs(o["self_s"]),
                  pct(o["self_s"] / pr["wall_s"]) if pr["wall_s"] else ""]
                 for o in pr.get("top_ops", [])[:TOP_OPS]])
    return intro + "\n\n" + phases + "\n\n" + cats + ("\n\n" + top if pr.get("top_ops") else "")


def update_ab(path: str) -> str:
    """One cut of the update, timed against the commit before it (``benchmarks/update_ab.py``):
    each side's times, the medians and their ratio."""
    d = load(path)
    r = d["results"]
    a, b = r["A"], r["B"]
    commit = (b["commit"] or "").split(" ")[0]

    def times(side: dict) -> str:
        return ", ".join(_secs(x) for x in side["update_s"])

    rounds = (f"{d['settings']['rounds']} rounds alternating", f"each the median of "
              f"{d['settings']['repeats']} updates")
    per_round = ", ".join(f"{x:.2f}" for x in r["per_round_ratio"])
    run_dir = Path(d["settings"]["run_dir"])
    batch = ("the account's batch" if run_dir.parent.name == "step_account"  # step_account.py's run
             else f"run `{run_dir.name}`'s median batch")
    if a.get("overrides") or b.get("overrides"):  # one checkout, two settings
        def named(side: dict) -> str:
            return ", ".join(f"`{o}`" for o in side.get("overrides") or []) or "the run's settings"

        return (f"One update of {batch} at {commit}, {rounds[0]} A ({named(a)}) "
                f"and B ({named(b)}), {rounds[1]}: A {times(a)} (median {_secs(a['median_s'])}); "
                f"B {times(b)} (median {_secs(b['median_s'])}). B / A: "
                f"{d['ratios']['b_over_a']:.3f} (per round {per_round}).")
    return (f"One update of {batch}, {rounds[0]} the "
            f"commit before ({a['commit']}) and after ({commit}), {rounds[1]}: before {times(a)} "
            f"(median {_secs(a['median_s'])}); "
            f"after {times(b)} (median {_secs(b['median_s'])}). After / before: "
            f"{d['ratios']['b_over_a']:.3f} (per round {per_round}).")


def make_train_ab(path: str = "benchmarks/results/make_train_ab.json") -> str:
    """The whole default job on two commits back to back (``benchmarks/make_train_ab.py``): per
    run its side, commit, wall time, median RL step, warm start, held-out gain and the other load
    beside it; the ratio of the sides' median wall times against the issue's goal."""
    d = load(path)
    s, runs = d["summary"], d["runs"]
    rows = []
    for r in runs:
        st = r.get("steps") or {}
        gain = "—" if r.get("gain") is None else f"{r['before']:.3f} -> {r['after']:.3f}"
        rows.append([f"{r['round'] + 1}", r["side"], f"`{r['commit']}`",
                     "exit 0" if r["returncode"] == 0 else f"**exit {r['returncode']}**",
                     _secs(r["wall_s"]), _secs(st.get("step_s")), _secs(st.get("warm_start_s")),
                     gain, f"{r['foreign_cores']:.2f}"])
    head = ["round", "side", "commit", "", "wall", "median RL step", "warm start",
            "held-out success", "other load (cores)"]
    args = d["settings"]["args"]
    extra = "; ".join(f"side {k}: `{' '.join(v)}`" for k, v in args.items() if v)
    ratio = s.get("wall_ratio")
    said = ("not measured yet (a side has no finished run)" if ratio is None else
            f"**{ratio:.3f}** (per round {', '.join(f'{x:.3f}' for x in s['pair_wall_ratios'])}; "
            f"the goal {d['goal']['wall_ratio']})")
    step = s.get("step_ratio")
    return table(head, rows) + (
        f"\n\n`make train` on empty caches on {_machine(d)}, "
        + (f"{len(runs)} of the " if len(runs) < len(d["settings"]["order"]) else "")
        + f"{len(d['settings']['order'])} runs in the order "
        f"{' '.join(d['settings']['order'])}" + (f" ({extra})" if extra else "") +
        f": B / A of the median wall times {said}"
        + ("" if step is None else f"; of the median RL step {step:.3f}") + ".")


def compile_probe(path: str = "benchmarks/results/compile_probe.json") -> str:
    """``torch.compile`` of the learner's forward and backward against eager
    (``benchmarks/compile_probe.py``): the median training step of each, the compilation's
    seconds and the steps it takes to pay back."""
    d = load(path)
    r, s = d["results"], d["settings"]
    back = r.get("steps_to_pay_back")
    pays = ("never pays back (the compiled step is not faster)" if back is None
            else f"pays back after about {back:,.0f} steps")
    return (f"On {_machine(d)}, one thread, `{s['dtype']}`, {s['rows']} rows of "
            f"{s['min_len']}-{s['max_len']} tokens a step, {s['steps']} steps a side: eager "
            f"{_secs(r['eager_step_s'])} a step, compiled {_secs(r['compiled_step_s'])} "
            f"(**x{d['ratios']['compiled_over_eager']:.2f}**); the compilation took "
            f"{_secs(r['compile_s'])} (its first step) and {pays}. Largest logprob difference "
            f"from eager on the first batch: {r['max_abs_logprob_diff']:.1e}.")


def scorer_cascade(path: str = "benchmarks/results/scorer_cascade.json") -> str:
    """The MI scorer on a panel-shaped call, the generic forward against the shared-context
    attention (``benchmarks/scorer_cascade.py``): each side's median, the ratio and the logprob
    difference."""
    d = load(path)
    r, s = d["results"], d["settings"]
    return (f"On {_machine(d)}, one thread, `{s['dtype']}`, {s['contexts']} contexts of "
            f"{s['ctx_len'][0]}-{s['ctx_len'][1]} tokens x {s['continuations']} continuations of "
            f"{s['cont_len'][0]}-{s['cont_len'][1]} ({r['pairs']:,} pairs), the median of "
            f"{s['repeats']} calls a side: the generic scorer {_secs(r['today_s'])}, the cascade "
            f"{_secs(r['cascade_s'])} (**x{d['ratios']['cascade_over_today']:.2f}**). Largest "
            f"difference of a summed logprob: {r['max_abs_logp_diff']:.3f} nats (sums of "
            f"{r['mean_abs_logp']:.0f} nats on average), {r['max_abs_logp_diff_per_token']:.1e} "
            f"a token.")


def attention_backward(path: str = "benchmarks/results/attention_backward.json") -> str:
    """One attention's forward and backward on one thread at the tiny model's shapes
    (``benchmarks/attention_backward.py``): bf16 SDPA, ``sdpa_fp32_backward`` and fp32 SDPA, each
    with its gradient error against float64."""
    d = load(path)
    s, shapes = d["settings"], d["results"]["shapes"]
    sides = ("sdpa", "sdpa_fp32_backward", "fp32")

    def ms(x: float) -> str:
        return f"{x * 1e3:.1f} ms"

    rows = []
    for key, v in shapes.items():
        n, length = key.split("x")
        rows.append([f"{n} x {length}",
                     *(f"{ms(v[side]['forward_s'])} + {ms(v[side]['backward_s'])}" for side in sides),
                     f"**x{d['ratios'][key + '_total']:.2f}**",
                     " / ".join(f"{v[side]['grad_error']:.3f}" for side in sides)])
    head = ["rows x tokens", "`sdpa` (bf16)", "`sdpa_fp32_backward`", "fp32 SDPA",
            "sdpa_fp32_backward / sdpa", "gradient error (sdpa / ours / fp32)"]
    return (f"On {_machine(d)}, one thread, {s['heads']} query heads and {s['kv_heads']} key/value "
            f"heads of {s['head_dim']}, causal, bf16 inputs; forward + backward, the median of "
            f"{s['repeats']} fresh inputs per side, the sides interleaved. Gradient error: the "
            "largest |difference| from a float64 computation on the same inputs, summed over q, k "
            "and v.\n\n" + table(head, rows))
