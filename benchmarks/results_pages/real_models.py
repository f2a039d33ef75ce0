"""Blocks from the SmolLM2 measurements other than the learning runs: the per-phase speed
(``benchmarks/results/real_models_speed.json``), one RL step per arm on a gridworld
(``real_models.json``) and the collapse instruments on that model
(``real_models_instruments.json``): results/real-models.md.

Every MI and retrieval value is read under the run's ``monitor.min_samples``
(:func:`.data.under_rule`): a measurement from fewer samples shows its count instead of a value
(``— (n = 11 < 16)``). These runs predate the rule; ``real_models.json`` records no first-turn
sample count, so its count is the one its retrieval@1 share implies out of the batch's first
turns (marked "implied")."""

from __future__ import annotations

import math

from .data import count, f, least_samples, load, median, no_value, pct, sci, table, under_rule

SPEED = "benchmarks/results/real_models_speed.json"
ARMS = "benchmarks/results/real_models.json"
INSTRUMENTS = "benchmarks/results/real_models_instruments.json"
LEARNING = "benchmarks/results/smollm2_learning.json"
DTYPES = ("float32", "bfloat16")
SHORT = {"float32": "fp32", "bfloat16": "bf16"}
#: the update variants of the speed table, in its order
UPDATES = {"full": "update, full fine-tuning",
           "full_ckpt": "update, full + activation checkpointing",
           "lora": "update, LoRA r={rank}", "lora_ckpt": "update, LoRA + checkpointing"}
#: the gridworld arms of real_models.json, as the table names them
ARM_NAMES = {"frozenlake": "FrozenLake, zero-shot", "sokoban": "Sokoban, zero-shot",
             "frozenlake_format_warm_start": "FrozenLake, {episodes}-episode format warm start "
                                             "(lr {lr}, {seconds:.0f} s)"}


def _res() -> dict:
    return load(SPEED)["results"]


def _peak(dtype: str) -> float:
    return _res()["peak"][f"{dtype}_{load(SPEED)['settings']['peak_size']}"]["gflops"]


def _share(flop: float, s: float, dtype: str) -> float:
    """A phase's FLOP rate as a share of the dtype's matmul peak."""
    return flop / s / 1e9 / _peak(dtype)


def _rate(x: float) -> str:
    """``100%``, ``12.9%``: a share of format errors."""
    return pct(x, 0 if x in (0, 1) else 1)


def _override(arm: dict, key: str) -> str | None:
    return next((o.split("=", 1)[1] for o in arm["overrides"] if o.startswith(key + "=")), None)


def _batch(overrides: list[str]) -> int:
    """The first turns of a step's batch (``rollout.env_groups`` x ``rollout.group_size``): the
    most samples its first-turn measurements can have."""
    value = {o.split("=", 1)[0]: o.split("=", 1)[1] for o in overrides if "=" in o}
    return int(value["rollout.env_groups"]) * int(value["rollout.group_size"])


def _step(arm: dict) -> tuple[dict, int]:
    """An arm's last step under its ``monitor.min_samples``, and that minimum."""
    least = least_samples(arm["overrides"])
    return under_rule(arm["per_step"][-1], least, _batch(arm["overrides"])), least


def _instrument_rows() -> tuple[list[dict], int]:
    """The instruments run's rows under its ``monitor.min_samples``, and that minimum."""
    d = load(INSTRUMENTS)
    least = least_samples(d["command"])
    return [under_rule(r, least, _batch(d["command"].split())) for r in d["rows"]], least


def _first_turn_mi(arm: dict) -> str:
    """The table's first-turn MI cell: the MI (null, bound) / retrieval@1 (chance), "no <think>
    to score", or the count that withholds them."""
    raw = arm["per_step"][-1]
    s, least = _step(arm)
    if "collapse/mi" in s:
        return (f"{f(s['collapse/mi'])} nats ({f(s['collapse/mi_null'])}, "
                f"{s['collapse/mi_bound']:.2f}) / {s['collapse/retrieval_acc@1']:.2f} "
                f"({s['collapse/retrieval_chance@1']:.2f})")
    if s.get("collapse/n_samples", 0) == 0 and "collapse/mi" not in raw:
        return "no `<think>` to score"
    return no_value(s, "collapse/mi", least)


def speed_setup() -> str:
    """How the phases were measured, and the CPU's own matmul peak per dtype."""
    st = load(SPEED)["settings"]
    upd = _res()["update"]["float32"]["full"]
    return """
Each (phase, dtype) in a fresh process at {threads} torch threads, medians of {repeats} after a
warm-up, at the preset's sizes ({episodes} episodes of one-digit Math, at most {new_tokens} new
tokens; update rows of ~{row_tokens:.0f} tokens with replies of {lo}-{hi} random tokens;
{minutes:.0f} minutes in all). Measured 2026-12-03 on the machine of the runs above (2-core AMD
EPYC with `avx512_bf16`), nothing else running. The roofline is the CPU's own matmul peak,
measured in the same run: **fp32 {fp32:.0f} GFLOP/s, bf16 {bf16:.0f} GFLOP/s** ({n}^2,
{ratio:.1f}x).""".format(
        threads=st["threads"], repeats=st["repeats"], episodes=st["episodes"],
        new_tokens=st["max_new_tokens"], row_tokens=round(upd["row_tokens"] / upd["rows"], -1),
        lo=st["reply_tokens_mean"] // 2, hi=st["reply_tokens_mean"] * 3 // 2,
        minutes=st["wall_s"] / 60, fp32=_peak("float32"), bf16=_peak("bfloat16"),
        n=st["peak_size"], ratio=_peak("bfloat16") / _peak("float32"))


def speed_table() -> str:
    """Per phase, fp32 against bf16: seconds, tokens/s, the update's share of the dtype's peak;
    the setting the preset picks (``settings.auto_dtype``) in bold."""
    r, st = _res(), load(SPEED)["settings"]

    def bold(cell: str, dtype: str) -> str:
        return f"**{cell}**" if dtype == st["auto_dtype"] else cell

    def speedup(fp32: dict, bf16: dict) -> str:
        return f"{fp32['s'] / bf16['s']:.2f}x"

    rows = []
    for eng, name in (("vllm", "generate, vLLM-CPU"), ("hf", "generate, HF engine")):
        g = {d: r["generate"][f"{eng}:{d}"] for d in DTYPES}
        if eng == "vllm":
            per = median(x["new_tokens_per_episode"] for x in g.values())
            name += f" ({g['float32']['episodes']} replies, ~{round(per, -1):.0f} new tokens each)"
        cells = [f"{g[d]['s']:.1f} s, {g[d]['tokens_per_s']:.0f} tok/s" for d in DTYPES]
        if eng == "vllm":
            cells = [bold(c, d) for c, d in zip(cells, DTYPES)]
        rows.append([name, *cells, speedup(*g.values())])
    for v, name in UPDATES.items():
        u = {d: r["update"][d][v] for d in DTYPES}
        cells = [f"{u[d]['s']:.1f} s, {u[d]['tokens_per_s']:.0f} tok/s, "
                 f"{pct(_share(u[d]['counted_flop'], u[d]['s'], d))}"
                 + (f" of the {SHORT[d]} peak" if v == "full" else "") for d in DTYPES]
        if v == "full":
            cells = [bold(c, d) for c, d in zip(cells, DTYPES)]
        rows.append([name.format(rank=st["lora_rank"]), *cells, speedup(*u.values())])
    sy = r["sync"]
    rows.append(["weight sync (object store) + probe",
                 *[f"{sy[d]['s']:.1f} s (probe {sy[d]['probe_s']:.1f} s)" for d in DTYPES],
                 speedup(sy["float32"], sy["bfloat16"])])
    for part, name in (("batch", "MI monitor, batch ({c} prompts x {n} replies)"),
                       ("panel", "MI monitor, probe panel ({c} x {n})")):
        m = {d: r["monitor"][d][part] for d in DTYPES}
        rows.append([name.format(c=m["float32"]["contexts"], n=m["float32"]["continuations"]),
                     *[f"{m[d]['s']:.1f} s, {m[d]['tokens_per_s']:.0f} tok/s" for d in DTYPES],
                     speedup(*m.values())])
    g = r["generate"]["vllm:float32"]
    return table(["phase", "fp32", "bf16 (the default here)", "bf16 speed-up"], rows) + """

Update shares are the FLOPs torch's counter counted against the same dtype's peak. Generation and
monitor rates count 2 N FLOPs for every prompt token, but vLLM and the scorer compute a shared
prompt once per group, so their "share of the peak" overstates (vLLM fp32 would be {vllm}) and is
left out here; the tokens/s are exact.""".format(vllm=pct(_share(g["flop"], g["s"], "float32")))


def speed_step() -> str:
    """The preset's step composed from the phases, per setting; the fastest one."""
    p = _res()["step_projection"]

    def step(key: str) -> float:
        return p[key]["step_s"]

    fp32, bf16 = step("vllm/full/float32"), step("vllm/full/bfloat16")
    fastest = min(p, key=step)
    timed = [r["timing_median_s"]["timing/step_s"] for r in load(LEARNING)["results"]]
    return """
**The step, composed from these phases** (generate + update + sync and probe + the monitor and
panel every {every}th step; not a timed step): fp32 full fine-tuning on vLLM {fp32:.1f} s, **bf16
full fine-tuning on vLLM {bf16:.1f} s: {speedup:.2f}x faster**, and {fastest} of the {n} settings
measured. LoRA does not pay on this CPU in bf16 ({lora:.1f} s); checkpointing costs {ckpt:.1f} s in
bf16 (it is faster in fp32, where the full update without it is memory-bound); the HF engine adds
~{hf:.0f} s a step. So the preset's default, `model.dtype=auto` (bf16 where the CPU has
`avx512_bf16`, fp32 otherwise), full fine-tuning, no checkpointing (the host-memory plan's first
choice when it fits) and vLLM, is the fastest setting here. The timed runs above agree: median
step {timed_lo:.0f}-{timed_hi:.0f} s.""".format(
        every=_res()["monitor"]["bfloat16"]["every"], fp32=fp32, bf16=bf16, speedup=fp32 / bf16,
        fastest=("the fastest" if fastest == "vllm/full/bfloat16"
                 else f"not the fastest ({fastest})"),
        n=len(p), lora=step("vllm/lora/bfloat16"), ckpt=step("vllm/full_ckpt/bfloat16") - bf16,
        hf=median(step(f"hf/{v}/bfloat16") - step(f"vllm/{v}/bfloat16") for v in UPDATES),
        timed_lo=min(timed), timed_hi=max(timed))


def speed_correctness() -> str:
    """The probe's floor and the sampled-token gap at bf16 and fp32."""
    b, s = _res()["correctness"]["bfloat16"], _res()["correctness"]["float32"]
    return """
**Correctness at bf16.** The probe's floor with identical weights {floor} nats a token (its
absolute minimum for bf16 is {tolerance}), after an update and a push {after} against its
threshold of {threshold}; the learner's logprob of the tokens vLLM sampled differs by {sampled} on
average (fp32: {fp32_floor} and {fp32_sampled}). The bf16 gap is the two sides rounding
differently, measured, and the probe's tolerances sit above it; in the runs the gaps stayed below
them at every sync.""".format(
        floor=f(b["probe_floor"]), tolerance=b["tolerance"], after=f(b["probe_after_update"]),
        threshold=f(b["probe_threshold"]), sampled=f(b["sampled_gap_mean"]),
        fp32_floor=sci(s["probe_floor"]), fp32_sampled=sci(s["sampled_gap_mean"]))


def gridworld_setup() -> str:
    """The budget of the one-step arms (their overrides) and what it cost."""
    arms = load(ARMS)["arms"]
    o = arms["frozenlake"]
    steps = [x["timing_median_s"]["step_s"] / 60 for x in arms.values()]
    walls = [x["wall_s"] / 60 for x in arms.values()]
    return """
Measured (`python benchmarks/real_models.py`, `benchmarks/results/real_models.json`; one 2-core
machine, 2026-12-01, one run at a time). The budget is what fits a CPU: {groups} groups x {size}
rollouts, {turns} turns of at most {tokens} new tokens, {episodes} held-out episodes (temperature
0.5), **one RL step per arm** (a SmolLM2 step takes {step_lo:.0f}-{step_hi:.0f} minutes here, an
arm {wall_lo:.0f}-{wall_hi:.0f} minutes; ~{wall:.0f} minutes for the {n}), the pretrained recipe
(`algorithm.lr=1e-6`), fp32, 2 FSDP ranks with activation checkpointing and {micro:,}-token
micro-batches (without them Ray's memory monitor killed the update on this 24 GB
machine).""".format(
        groups=_override(o, "rollout.env_groups"), size=_override(o, "rollout.group_size"),
        turns=_override(o, "rollout.max_turns"), tokens=_override(o, "engine.max_new_tokens"),
        episodes=_override(o, "trainer.eval_episodes"), step_lo=min(steps), step_hi=max(steps),
        wall_lo=min(walls), wall_hi=max(walls), wall=sum(walls), n=count(len(arms)),
        micro=int(_override(o, "learner.micro_batch_tokens")))


def gridworld_table() -> str:
    """Per arm: held-out success and format errors before -> after, the step's instruments and
    its phases."""
    rows = []
    for key, arm in load(ARMS)["arms"].items():
        s, t = arm["per_step"][-1], arm["timing_median_s"]
        mi = _first_turn_mi(arm)
        rows.append([
            ARM_NAMES[key].format(episodes=_override(arm, "trainer.warm_start.episodes"),
                                  lr=_override(arm, "trainer.warm_start.lr"),
                                  seconds=arm.get("warm_start", {}).get("timing/warm_start_s", 0)),
            f"{f(arm['eval_success_before'])} -> {f(arm['eval_success_after'])}",
            f"{_rate(arm['eval_format_error_rate_before'])} -> "
            f"{_rate(arm['eval_format_error_rate_after'])}",
            _rate(s["rollout/format_error_rate"]) + (" (T = 1)" if "warm_start" in arm else ""),
            f"{s['actor/entropy']:.2f}", mi,
            f"{t['generate_s']:.0f} / {t['update_s']:.0f} / {t['sync_s']:.1f} + "
            f"{t['probe_s']:.1f} / {t['monitor_s']:.0f} s ({t['step_s']:.0f} s)"])
    head = ["arm", "held-out success before -> after 1 step", "held-out format errors",
            "training format errors", "token entropy",
            "first-turn MI (null, bound) / retrieval@1 (chance)",
            "step: generate / update / sync + probe / monitor (total)"]
    return table(head, rows)


def gridworld_reading() -> str:
    """What the one-step arms say: the logprob gaps, the format, the warm start's MI."""
    arms = load(ARMS)["arms"]
    steps = [a["per_step"][-1] for a in arms.values()]
    gap = [s["actor/logprob_gap"] for s in steps]
    probe = [s["sync/probe_logprob_gap"] for s in steps]
    warm = arms["frozenlake_format_warm_start"]
    ws = warm["per_step"][-1]
    return """
Engine and learner agree on a real BPE: `actor/logprob_gap` {gap_lo} to {gap_hi} and the post-sync
probe {probe_lo} to {probe_hi} nats per token in every arm. What the numbers say: SmolLM2-135M does
not follow the `<think>...</think><answer>...</answer>` format zero-shot (none of the sampled
replies did, even with a worked example in the system prompt), so every turn is a format error,
every group's rewards are equal, GRPO gets no signal and the MI monitor has no reasoning to score;
one step at `algorithm.lr=1e-6` changes nothing measurable. RAGEN-2 starts from 0.5B-3B instruct
models. A short behaviour-cloning format warm start (`trainer.warm_start.enabled=true` on top of
the recipe) fixes the format at temperature 0.5 ({eval_errors} errors) but not at 1.0
({train_errors}); its reasoning is the expert's template (`I am at row 1, column 1. The goal is at
row 4, column 4. ...`), and on the default FrozenLake layout (start and goal fixed, only the holes
move) that text barely depends on the map: {evidence}. So the monitor does not read the grid off
this model, which is the honest outcome for a 135M model in one CPU step; the "reasoning should
depend on the input" check needs a larger model or many more steps (GPU).""".format(
        gap_lo=sci(min(gap), 1), gap_hi=sci(max(gap), 1), probe_lo=sci(min(probe), 1),
        probe_hi=sci(max(probe), 1), eval_errors=pct(warm["eval_format_error_rate_after"], 1),
        train_errors=pct(ws["rollout/format_error_rate"]), evidence=_warm_evidence(warm))


def _warm_evidence(warm: dict) -> str:
    """Why the warm start's reasoning is read as blind to the map: its first-turn MI where
    ``monitor.min_samples`` lets it stand, else the probe panel of the instruments run."""
    s, least = _step(warm)
    if "collapse/mi" in s:
        return (f"MI {s['collapse/mi']:.2f} nats against a bound of {s['collapse/mi_bound']:.2f}, "
                f"retrieval@1 {s['collapse/retrieval_acc@1']:.2f} against chance "
                f"{s['collapse/retrieval_chance@1']:.2f}")
    n = s.get("collapse/n_samples")
    if n is None:
        why = (f"its first-turn MI and retrieval are withheld (the run logged no sample count, "
               f"and `monitor.min_samples` = {least} cannot be checked)")
    else:
        why = (f"its first-turn MI and retrieval are withheld ({n:g} parsable samples, under "
               f"`monitor.min_samples` = {least}")
        why += (f"; the run logged no count, and {n:g} is the only count of its at most "
                f"{_batch(warm['overrides'])} first turns that its retrieval@1 share fits)"
                if s.get("collapse/n_samples_implied") else ")")
    rows, _ = _instrument_rows()
    panel = [r for r in rows if "collapse/panel/mi" in r]
    if not panel:
        return why + ", and no probe panel of it measured a value either"
    counts = sorted({int(r["collapse/panel/n_samples"]) for r in panel})
    within = all(r["collapse/panel/mi"] <= r["collapse/panel/mi_floor"] for r in panel)
    chance = all(r["collapse/panel/retrieval_acc@1"] <= r["collapse/panel/retrieval_chance@1"]
                 for r in panel)
    reading = ("its MI within the permutation floor" if within else "its MI above its floor")
    reading += (" and retrieval@1 at or below chance" if chance else ", retrieval@1 above chance")
    steps = "at both steps" if len(panel) == 2 else f"at its {count(len(panel))} steps"
    return (f"{why}, but the probe panel of the same arm (below; {'-'.join(map(str, counts[::len(counts) - 1 or 1]))} "
            f"samples a measurement) finds {reading} {steps}")


def instruments() -> str:
    """The probe panel and I(A; Z | X) on the format-warm-start arm, before and after its step."""
    d = load(INSTRUMENTS)
    (r0, r1), least = _instrument_rows()

    def panel(r: dict, key: str) -> float:
        return r[f"collapse/panel/{key}"]

    def ci(r: dict) -> str:
        return f"{f(panel(r, 'mi'))} [{f(panel(r, 'mi_lo'))}, {f(panel(r, 'mi_hi'))}]"

    share = sorted(panel(r, "reasoning_frac") for r in (r0, r1))
    cost = sorted(r["timing/panel_s"] for r in (r0, r1))
    prompts = int(panel(r0, "n_prompts"))
    batch = {k[len("collapse/action/"):]: v for k, v in r1.items()
             if k.startswith("collapse/action/")}
    if "mi" in batch:
        batch_mi = (f"and the batch's `collapse/action/mi` {batch['mi']:.2f} (bound "
                    f"{batch['mi_bound']:.2f}, p {batch['mi_p_value']:.3f}, retrieval "
                    f"{batch['retrieval_acc@1']:.2f} against {batch['retrieval_chance@1']:.2f})")
    else:
        batch_mi = (f"while the batch's `collapse/action/mi` and its bound, p and retrieval "
                    f"show {no_value(r1, 'collapse/action/mi', least)}: too few answers in groups "
                    f"of 2+ for `monitor.min_samples`")
    return """
The format-warm-start arm again, with an {prompts}-prompt x {samples}-sample probe panel
(`monitor.panel_size={prompts} monitor.panel_samples={samples}`; one run on {date}, its command and
rows in `benchmarks/results/real_models_instruments.json`). Only {reasoning} of the panel's first
turns held a `<think>` span to score. Panel MI {ci0} nats at step {step0} against a floor of
{floor0} (bound log {n} = {log_n:.2f}), {ci1} (floor {floor1}) after the step; retrieval@1
{ret0:.2f} and {ret1:.2f} (chance {chance}); {healthy}: the reasoning does not read the map. The
answers do follow the reasoning, though: `collapse/panel/action/mi` {a_mi:.2f} nats after the step
(bound {a_bound:.2f}, null {a_null:.2f}, p {a_p:.3f}), its own reasoning retrieved at {a_ret:.2f}
against chance {a_chance:.2f}, {batch_mi}; at step {step0} the
panel's I(A; Z | X) estimate was {a0_mi:.2f} (null {a0_null:.2f}) on {a0_n} samples, the
small-sample negative bias of the estimator. So the 135M model, after a format warm start, writes a
template that ignores its input and then acts on what the template says. A panel measurement cost
{cost_lo:.0f}-{cost_hi:.0f} s there, the per-batch monitor {monitor:.0f} s, against a {update:.0f} s
update.""".format(
        prompts=prompts, samples=d["command"].split("monitor.panel_samples=")[1].split()[0],
        date=d["date"], reasoning=f"{pct(share[0])[:-1]}-{pct(share[-1])}", ci0=ci(r0),
        step0=r0["step"], floor0=f(panel(r0, "mi_floor")), n=round(math.exp(panel(r0, "log_n"))),
        log_n=panel(r0, "log_n"), ci1=ci(r1), floor1=f(panel(r1, "mi_floor")),
        ret0=panel(r0, "retrieval_acc@1"), ret1=panel(r1, "retrieval_acc@1"),
        chance=panel(r0, "retrieval_chance@1"),
        healthy=("never healthy" if not (panel(r0, "healthy") or panel(r1, "healthy"))
                 else "healthy"),
        a_mi=panel(r1, "action/mi"), a_bound=panel(r1, "action/mi_bound"),
        a_null=panel(r1, "action/mi_null"), a_p=panel(r1, "action/mi_p_value"),
        a_ret=panel(r1, "action/retrieval_acc@1"), a_chance=panel(r1, "action/retrieval_chance@1"),
        batch_mi=batch_mi,
        a0_mi=panel(r0, "action/mi"), a0_null=panel(r0, "action/mi_null"),
        a0_n=int(panel(r0, "action/n_samples")), cost_lo=cost[0], cost_hi=cost[-1],
        monitor=r1["timing/monitor_s"], update=r1["timing/update_s"])
