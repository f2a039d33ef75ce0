"""Does scoring in bf16 move the probe panels' MI? One checkpoint's samples, fp32 vs bf16 scores.

The same panel samples of one checkpoint are scored by the learner's scorer in fp32 and in bf16,
and the panels' metrics computed from each.

Why: a run with ``model.dtype=bfloat16`` (commit 3c0e556, ``make_train_ab.py``) saw its later-turn
panel MI fall 0.20 -> 0.07 where the fp32 run's rose 0.24 -> 0.61. Either the policies differ or
the instrument does; this measures the instrument alone, with the policy and its samples held
fixed.

One process, no Ray, no learner ranks:

1. The checkpoint (``--run DIR``, ``--step N``, default its newest) is exported to a model folder
   and its run's config composed exactly as ``ragen2 eval`` does (:mod:`ragen2.export`:
   ``find_checkpoint``, ``run_config``, ``export_checkpoint``; ``--set KEY=VALUE`` on top).
2. The panels are the trainer's (:func:`ragen2.controller.panels.make_panels` over
   :class:`~ragen2.controller.problems.Problems`), sampled as ``Panels.measure`` samples them: the
   panel's specs split over ``rollout.num_workers`` chunks (:func:`ragen2.rollout.pool.split`),
   chunk i with ``seeding.panel_turn_sampling_seed(seed, step, i)`` (the first-turn panel:
   ``panel_sampling_seed``, one turn), the later-turn panel with ``max_turns = turn + 1`` and its
   scripted ``prefixes()``, all by one in-process ``RolloutWorker`` (as ``ragen2 eval``) whose
   engine runs in the run's ``model.dtype``. With the run's engine and worker count these are the
   samples the run's own panel drew at that step (``samples_match_run`` checks the reasoning text
   against ``RUN_DIR/panel[/turns]/step_XXXXXX.jsonl``). ``--repeat K``: K draws, draw r > 0 with
   the seeds of worker indices ``r * n .. r * n + n - 1`` (new streams, same function).
3. Each draw is measured twice by the panel's own ``measure`` (so MI, bootstrap, null, floor and
   retrieval are the production code's, with the same bootstrap / permutation seeds), each time
   with a scorer that is the learner's cross-scoring, :func:`ragen2.learner.probes.score` (items of
   up to 64 continuations per context, its slice budget, :func:`~ragen2.learner.scoring
   .score_continuations` at the learner's temperature, ``learner_settings(cfg).temperature``), run
   on one plain rank holding the exported policy, loaded as the learner loads it
   (:func:`ragen2.learner.build.load_lm`: fp32, ``learner.attn_implementation``): once as loaded,
   once with its parameters cast to bf16 and its buffers kept fp32 -- what FSDP2's
   ``MixedPrecisionPolicy(param_dtype=bfloat16)`` computes with (fp32 master weights cast for
   compute; buffers such as RoPE's ``inv_freq`` are not cast, unlike ``model.to(bfloat16)``).

Reported per panel (``first``: ``collapse/panel/*``, ``turns``: ``collapse/panel/turns/*``) and
draw: each dtype's metrics (``mi``, ``mi_lo``, ``mi_hi``, ``mi_null``, ``mi_floor``,
``mi_p_value``, ``healthy``, ``retrieval_acc@1`` ... in ``summary``, every key in ``metrics``), the
run's logged values at that step, and the gap of every scored (sample, context) entry, all the
panel's scorer calls together (cross-scores, the action MI's, the contrast's):
``|logp_bf16 - logp_fp32|`` of the summed logprob (``seq_*``) and of it over the entry's tokens
(``seq_per_token_*``: the entry's mean drift per token, a lower bound on its tokens' mean |gap|),
mean / p99 / max, the signed mean, and ``top1_agree`` (the share of rows whose best-scoring column
is the same). Not reproduced: several learner ranks (FSDP2 gathers the same bf16 cast, but items
are dealt over ranks: the same numbers), a LoRA run's unmerged adapters (scored here merged, then
cast: bf16 rounding apart, the same function), a GPU's free-memory slice budget (``cluster.device``
is honoured; slicing changes batching only).

Usage::

    python benchmarks/bf16_panel_mi.py --run RUN_DIR                  # newest checkpoint, 1 draw
    python benchmarks/bf16_panel_mi.py --run RUN_DIR --step 30 --repeat 3 --name bf16_panel_mi_B
    python benchmarks/bf16_panel_mi.py --run RUN_DIR --quick          # the later-turn panel only

Writes ``benchmarks/results/<--name, default bf16_panel_mi>[.quick].json``. The tiny default
model: ~1-3 minutes a draw on 2 cores (engine start-up, 128 episodes a panel, 2 x ~4,000 scored
entries a panel), most of it vLLM's start.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import sys
import tempfile
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Callable, NamedTuple, Sequence

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from common import emit, git_commit, median, parse_args, write_result  # noqa: E402

#: the panel metrics printed and summarised (those a measurement has; a withheld one has none)
SUMMARY = ("mi", "mi_lo", "mi_hi", "mi_null", "mi_floor", "mi_p_value", "healthy",
           "retrieval_acc@1", "retrieval_chance@1", "h_cond", "h_marginal", "n_samples",
           "n_prompts")
DTYPES = ("float32", "bfloat16")


# --------------------------------------------------------------------------- the comparison
@dataclass(frozen=True)
class Call:
    """One scorer call: what it was asked (``digest``) and what it returned, (S, K) each."""

    digest: str
    logp: np.ndarray
    tokens: np.ndarray


def digest(contexts: Sequence[Sequence[int]], continuations: Sequence[Sequence[int]],
           columns: np.ndarray) -> str:
    """A fingerprint of a scorer call's inputs (two dtypes must be asked the same things)."""
    text = json.dumps([[list(map(int, c)) for c in contexts],
                       [list(map(int, c)) for c in continuations], np.asarray(columns).tolist()])
    return hashlib.sha1(text.encode()).hexdigest()


def gap_stats(ref: np.ndarray, other: np.ndarray, tokens: np.ndarray) -> dict[str, float]:
    """|other - ref| over entries (summed logprobs, any shape) and that over each entry's token
    count (``tokens``, at least 1): mean, 99th percentile (numpy's linear), max; the signed mean
    of other - ref; the entry and token counts.

    Example: ref [-10, -20, -5, -1], other [-10.5, -19, -5, -3], tokens [5, 10, 1, 4]: |gap|
    [0.5, 1, 0, 2] (mean 0.875, p99 1.97, max 2), per token [0.1, 0.1, 0, 0.5] (mean 0.175, p99
    0.488, max 0.5), signed mean -0.375, 4 entries, 20 tokens.
    """
    ref, other = np.asarray(ref, np.float64).ravel(), np.asarray(other, np.float64).ravel()
    n = np.maximum(np.asarray(tokens, np.int64).ravel(), 1)
    d = other - ref
    seq, tok = np.abs(d), np.abs(d) / n
    if d.size == 0:
        return {"entries": 0, "tokens": 0}
    return {"entries": int(d.size), "tokens": int(n.sum()), "signed_seq_mean": float(d.mean()),
            "seq_mean": float(seq.mean()), "seq_p99": float(np.quantile(seq, 0.99)),
            "seq_max": float(seq.max()), "seq_per_token_mean": float(tok.mean()),
            "seq_per_token_p99": float(np.quantile(tok, 0.99)),
            "seq_per_token_max": float(tok.max())}


def compare_calls(ref: Sequence[Call], other: Sequence[Call]) -> dict[str, float]:
    """:func:`gap_stats` over every entry of two recordings of the same scorer calls, plus
    ``top1_agree``: the share of rows (samples, call by call) whose highest-scoring column is the
    same in both. ValueError when the calls were not asked the same things."""
    if [c.digest for c in ref] != [c.digest for c in other]:
        raise ValueError(f"the two scorers were asked different things ({len(ref)} and "
                         f"{len(other)} calls): the comparison needs the same samples")
    if not ref:
        return {"entries": 0, "tokens": 0}
    cat = lambda calls, f: np.concatenate([getattr(c, f).ravel() for c in calls])  # noqa: E731
    out = gap_stats(cat(ref, "logp"), cat(other, "logp"), cat(ref, "tokens"))
    same = np.concatenate([a.logp.argmax(1) == b.logp.argmax(1) for a, b in zip(ref, other)
                           if a.logp.size])
    out["top1_agree"] = float(same.mean()) if same.size else float("nan")
    return out


# --------------------------------------------------------------------------- the scorers
def with_param_dtype(model: Any, dtype: Any) -> Any:
    """A copy of ``model`` whose parameters are in ``dtype`` and whose buffers are as they were:
    FSDP2 ``MixedPrecisionPolicy(param_dtype=dtype)``'s compute copy (``model`` is unchanged)."""
    out = copy.deepcopy(model)
    for p in out.parameters():  # tied weights are one parameter: cast once, still tied
        p.data = p.data.to(dtype)
    return out


def learner_scorer(cfg: Any, model: Any, dtype: str, temperature: float,
                   record: list[Call] | None = None) -> Callable:
    """The monitor's ``Scorer`` (``scorer(contexts, continuations, columns) -> (logp, tokens)``,
    :data:`ragen2.collapse.monitor.Scorer`) as the learner computes it:
    :func:`ragen2.learner.probes.score` on one rank (world size 1) holding ``model``, whose compute
    dtype is ``dtype`` (the slice budget reads it on a GPU). Each call is appended to ``record``."""
    import torch

    from ragen2.learner import probes
    from ragen2.learner.rank_state import RankState
    from ragen2.learner.settings import LearnerSettings

    device = next(model.parameters()).device
    rank = RankState(cfg=replace(cfg, model=replace(cfg.model, dtype=dtype)), model_path="",
                     rank=0, world_size=1, settings=LearnerSettings(temperature=temperature),
                     device=torch.device(device), model=model, trainable=[], optim=None,
                     ref=None, critic=None, critic_optim=None, lora=False, sharded=False,
                     logits_to_keep=False, lora_dropout=False)

    def scorer(contexts: list[list[int]], continuations: list[list[int]],
               columns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        columns = np.asarray(columns)
        logp, tokens = probes.assemble_scores(
            columns.shape, [probes.score(rank, contexts, continuations, columns)])
        if record is not None:
            record.append(Call(digest(contexts, continuations, columns), logp, tokens))
        return logp, tokens

    return scorer


# --------------------------------------------------------------------------- sampling
def sampling_seeds(seed_fn: Callable[[int, int, int], int], seed: int, step: int, workers: int,
                   draw: int) -> list[int]:
    """The sampling seed of each worker's chunk: draw 0 the trainer's own at ``step``
    (``seed_fn(seed, step, i)``, i < ``workers``); draw r those of indices ``r * workers + i``."""
    return [seed_fn(seed, step, draw * workers + i) for i in range(workers)]


def sample_panel(worker: Any, specs: list[Any], seeds: Sequence[int], max_turns: int,
                 prefixes: dict[int, list[str]] | None) -> list[Any]:
    """The panel's trajectories in spec order: ``specs`` split into ``len(seeds)`` contiguous
    chunks as the worker pool splits them, chunk i sampled with ``seeds[i]`` by ``worker``."""
    from ragen2.rollout.pool import split

    trajs: list[Any] = []
    for chunk, seed in zip(split(specs, len(seeds)), seeds):
        if chunk:
            part, _ = worker.rollout(chunk, seed, worker.engine.policy_version, evaluation=False,
                                     max_turns=max_turns, prefixes=prefixes)
            trajs.extend(part)
    return trajs


# --------------------------------------------------------------------------- the run's side
def logged_metrics(run_dir: Path, step: int, prefix: str) -> dict[str, float]:
    """The run's ``metrics.jsonl`` values under ``prefix`` at ``step`` (prefix removed; only
    keys directly under it, e.g. not ``action/*``); {} when it logged none there."""
    path = run_dir / "metrics.jsonl"
    out: dict[str, float] = {}
    if not path.is_file():
        return out
    for line in path.read_text().splitlines():
        row = json.loads(line)
        if row.get("step") == step:
            out.update({k[len(prefix):]: v for k, v in row.items()
                        if k.startswith(prefix) and "/" not in k[len(prefix):]})
    return out


def samples_match(ours: Sequence[dict], logged_file: Path) -> float | None:
    """Share of panel prompts whose sampled reasoning texts equal the run's record of the same
    step (``panel[/turns]/step_XXXXXX.jsonl``); None without that file."""
    if not logged_file.is_file():
        return None
    theirs = [json.loads(x) for x in logged_file.read_text().splitlines() if x.strip()]
    same = sum(a["key"] == b["key"] and a["reasoning"] == b["reasoning"]
               for a, b in zip(ours, theirs))
    return same / max(len(ours), len(theirs), 1)


def config_drift(saved: dict, composed: dict, prefix: str = "") -> list[str]:
    """``key: saved -> composed`` for every leaf both configs have and that differs (the run's
    ``.hydra/config.yaml`` against its overrides composed by this checkout); interpolations
    (``${...}``) skipped."""
    out = []
    for k in sorted(set(saved) & set(composed)):
        a, b = saved[k], composed[k]
        if isinstance(a, dict) and isinstance(b, dict):
            out.extend(config_drift(a, b, f"{prefix}{k}."))
        elif a != b and not (isinstance(a, str) and "${" in a):
            out.append(f"{prefix}{k}: {a!r} -> {b!r}")
    return out


# --------------------------------------------------------------------------- main
class PanelPlan(NamedTuple):
    """How ``Panels.measure`` samples and logs one panel."""

    panel: Any  # the ProbePanel or TurnPanel (None: the run has none)
    seed_fn: Callable[[int, int, int], int]  # seeding.panel_(turn_)sampling_seed
    max_turns: int
    prefixes: dict[int, list[str]] | None  # the later-turn panel's scripted openings
    prefix: str  # of its metrics
    records: str  # its samples' folder in the run directory


def panel_plans(first: Any, turns: Any) -> dict[str, PanelPlan]:
    from ragen2 import seeding

    return {"first": PanelPlan(first, seeding.panel_sampling_seed, 1, None, "collapse/panel/",
                               "panel"),
            "turns": PanelPlan(turns, seeding.panel_turn_sampling_seed,
                               turns.turn + 1 if turns else 0,
                               turns.prefixes() if turns else None, "collapse/panel/turns/",
                               "panel/turns")}


def measure_draw(panel: Any, trajs: list[Any], models: dict[str, Any], cfg: Any,
                 temperature: float, step: int, prefix: str) -> dict[str, Any]:
    """Both dtypes' measurements of one draw by the panel's own ``measure``, and the gap."""
    out: dict[str, Any] = {}
    calls: dict[str, list[Call]] = {}
    for dtype, model in models.items():
        calls[dtype] = []
        scorer = learner_scorer(cfg, model, dtype, temperature, calls[dtype])
        m = {k[len(prefix):]: v for k, v in panel.measure(trajs, scorer, step).metrics.items()}
        out[dtype] = {"summary": {k: m[k] for k in SUMMARY if k in m}, "metrics": m}
    out["gap"] = compare_calls(calls["float32"], calls["bfloat16"])
    return out


def main() -> None:
    def extra(ap):
        ap.add_argument("--run", required=True, type=Path, help="a finished ragen2 run directory")
        ap.add_argument("--step", type=int, default=None,
                        help="its checkpoint of this step (default: the newest)")
        ap.add_argument("--repeat", type=int, default=1, help="sampling draws (draw 0: the run's)")
        ap.add_argument("--panels", nargs="+", default=["first", "turns"],
                        choices=["first", "turns"])
        ap.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                        help="config overrides on top of the run's (e.g. engine=hf)")
        ap.add_argument("--name", default="bf16_panel_mi", help="the result's file name")

    args = parse_args(__doc__.split("\n")[0], extra)
    if args.quick:
        args.panels, args.repeat = ["turns"], 1
    logging.basicConfig(level=logging.WARNING, format="%(message)s")

    import torch
    import yaml

    from ragen2.controller import learner_settings
    from ragen2.controller.panels import make_panels
    from ragen2.controller.problems import Problems
    from ragen2.export import export_checkpoint, find_checkpoint, run_config
    from ragen2.learner import checkpoint
    from ragen2.learner.build import load_lm
    from ragen2.rollout.worker import RolloutWorker
    from ragen2.train import resolve_model_path

    run = args.run.resolve()
    ckpt = find_checkpoint(checkpoint.checkpoint_root(run) / f"step_{args.step:06d}"
                           if args.step is not None else run)
    state = checkpoint.read_state(ckpt)
    step = int(state["step"])
    cfg = run_config(ckpt, args.set)
    saved = run / ".hydra" / "config.yaml"
    composed = json.loads(json.dumps(asdict(cfg), default=str))  # tuples as YAML's lists
    drift = (config_drift(yaml.safe_load(saved.read_text()), composed)
             if saved.is_file() else ["no .hydra/config.yaml"])
    for d in drift:
        print(f"[bf16_panel_mi] config differs from the run's: {d}", flush=True)
    temperature = learner_settings(cfg).temperature
    workers = cfg.rollout.num_workers
    plans = panel_plans(*make_panels(cfg, Problems(cfg)))
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="ragen2-bf16-panel-") as tmp:
        folder = str(export_checkpoint(ckpt, tmp, cfg, resolve_model_path(cfg)))
        worker = RolloutWorker(cfg, folder, 0)
        tok = worker.engine.tokenizer
        eos_text = tok.decode([tok.eos_token_id]) if tok.eos_token_id is not None else None
        fp32 = load_lm(cfg, folder).to(cfg.cluster.device).eval()
        models = {"float32": fp32, "bfloat16": with_param_dtype(fp32, torch.bfloat16)}
        for name in args.panels:
            p = plans[name]
            if p.panel is None:
                print(f"[bf16_panel_mi] {name}: the run has no such panel", flush=True)
                continue
            logged = logged_metrics(run, step, p.prefix)
            draws = []
            for r in range(args.repeat):
                seeds = sampling_seeds(p.seed_fn, cfg.seed, step, workers, r)
                trajs = sample_panel(worker, p.panel.specs(), seeds, p.max_turns, p.prefixes)
                d = {"draw": r, "seeds": seeds,
                     **measure_draw(p.panel, trajs, models, cfg, temperature, step, p.prefix)}
                if r == 0:
                    d["samples_match_run"] = samples_match(
                        p.panel.records(trajs, step, eos_text),
                        run / p.records / f"step_{step:06d}.jsonl")
                draws.append(d)
                report(name, d, logged if r == 0 else {})
            results[name] = {"logged": {k: logged[k] for k in SUMMARY if k in logged},
                             "draws": draws, "median": medians(draws)}
    ratios = {}
    for name, res in results.items():
        for key, value in res["median"].items():
            if key in ("mi_abs_diff", "retrieval_acc@1_abs_diff", "gap_seq_per_token_mean"):
                ratios[f"{name}_{key}"] = value
    write_result(args.name, args,
                 {"run": str(run), "checkpoint": str(ckpt), "step": step,
                  "policy_version": state.get("policy_version"), "run_dtype": cfg.model.dtype,
                  "engine": cfg.engine.name, "temperature": temperature,
                  "sampling_workers": workers, "repeat": args.repeat, "panels": args.panels,
                  "overrides": args.set, "config_drift": drift, "commit": git_commit()},
                 results, ratios, {k: "lower" for k in ratios})
    emit({"ratios": ratios, "medians": {k: v["median"] for k, v in results.items()}})


def medians(draws: Sequence[dict]) -> dict[str, float]:
    """Over draws: the median of each dtype's ``mi``, ``mi_lo``, ``mi_floor`` and
    ``retrieval_acc@1``, of |bf16 - fp32| of ``mi`` and ``retrieval_acc@1``, and of the gap's
    ``seq_per_token_mean`` and ``seq_max``; keys a withheld measurement lacks are left out."""
    out: dict[str, float] = {}
    for key in ("mi", "mi_lo", "mi_floor", "retrieval_acc@1"):
        pairs = [(d["float32"]["summary"].get(key), d["bfloat16"]["summary"].get(key))
                 for d in draws]
        pairs = [(a, b) for a, b in pairs if a is not None and b is not None]
        if pairs:
            out[f"{key}_float32"] = median([a for a, _ in pairs])
            out[f"{key}_bfloat16"] = median([b for _, b in pairs])
            if key in ("mi", "retrieval_acc@1"):
                out[f"{key}_abs_diff"] = median([abs(b - a) for a, b in pairs])
    for key in ("seq_per_token_mean", "seq_max"):
        values = [d["gap"][key] for d in draws if key in d["gap"]]
        if values:
            out[f"gap_{key}"] = median(values)
    return out


def report(name: str, d: dict, logged: dict[str, float]) -> None:
    """One draw's lines: each summary key fp32 / bf16 / difference (and the run's logged value)."""
    a, b = d["float32"]["summary"], d["bfloat16"]["summary"]
    match = d.get("samples_match_run")
    print(f"[bf16_panel_mi] {name} draw {d['draw']}"
          + (f" (samples equal to the run's: {match:.2f})" if match is not None else ""),
          flush=True)
    for k in SUMMARY:
        if k in a and k in b:
            run = f"  run logged {logged[k]:.4f}" if k in logged else ""
            print(f"  {k:20s} fp32 {a[k]:9.4f}  bf16 {b[k]:9.4f}  diff {b[k] - a[k]:+.4f}{run}")
    g = d["gap"]
    if g.get("entries"):
        print(f"  |logp bf16 - fp32| over {g['entries']} entries ({g['tokens']} tokens): per "
              f"sequence mean {g['seq_mean']:.3g} p99 {g['seq_p99']:.3g} max {g['seq_max']:.3g}; "
              f"per token mean {g['seq_per_token_mean']:.3g} p99 {g['seq_per_token_p99']:.3g} "
              f"max {g['seq_per_token_max']:.3g}; signed mean {g['signed_seq_mean']:+.3g}; top-1 "
              f"column agrees on {g['top1_agree']:.3f} of rows", flush=True)


if __name__ == "__main__":
    main()
