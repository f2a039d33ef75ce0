"""What every metric key a run can log means: the glossary the documentation's metrics page is
generated from (``ragen2.reference.metrics_reference``).

Keys are namespaced (``rollout/…``, ``actor/…``, ``collapse/…``). Families of keys that share
their fields (the episode statistics of ``rollout/``, ``eval/`` and each env of a mixture; the MI
estimate at each of its scopes) are written once: a :class:`Family` is a set of prefixes times a
set of fields. A placeholder in angle brackets stands for a segment that varies:

* ``<env>``: an ``env.mix`` / ``env.eval`` entry name;
* ``<k>``: a retrieval cut-off (1, 2, 4, 8); ``<i>``: a gradient-SNR bucket (0 = no reward spread);
* ``<grade>``: an SNR grade (low, medium, high); ``<term>``: a regulariser (entropy, kl);
* ``<coord>``: a state coordinate an env reports (``state_coordinates()``: row, col, boxes).

``tests/test_reference.py`` fails when a key the code can log has no entry here: every literal key
in ``ragen2/`` (a scan of its source) and every key of the smoke run's ``metrics.jsonl``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache

__all__ = ["FAMILIES", "Family", "describe", "patterns"]


@dataclass(frozen=True)
class Family:
    """Keys ``prefix + field`` for every prefix and field, with one description per field."""

    title: str
    about: str
    prefixes: tuple[str, ...]
    fields: dict[str, str]


EPISODES = {
    "success": "share of episodes the env marked successful (`info['success']`)",
    "reward_mean": "mean episode return, format penalties included",
    "reward_std": "std of the episode returns over the batch",
    "env_return_mean": "mean return the env itself paid (format penalties left out)",
    "group_reward_std_mean": "mean over groups of σ_g, the std (ddof 0) of a group's returns",
    "zero_std_group_frac": "share of groups whose returns do not differ (σ_g <= 1e-8)",
    "num_turns_mean": "mean turns per episode",
    "format_error_rate": "share of turns whose reply did not parse as <think>…</think><answer>…</answer>",
    "invalid_action_rate": "share of turns whose action the env flagged invalid",
    "truncated_frac": "share of episodes cut by rollout.max_turns or the context budget",
    "response_tokens_mean": "generated tokens per turn",
    "sequence_tokens_mean": "tokens per trajectory (prompt, responses and observations)",
    "env_errors": "episodes whose env raised (counted as failures, left out of the update)",
}

MI = {
    "mi": "I(X; Z) in nats: how much the reasoning Z depends on the input X (the MI estimate)",
    "mi_token_mean": "the same estimate from per-token mean logprobs instead of sums",
    "h_cond": "H(Z | X) in nats: diversity of the reasoning for a fixed input",
    "h_marginal": "H(Z) in nats, the reasoning's entropy under the mixture over inputs",
    "marginal_std": "std of the marginal log-likelihoods (a scale for mi_z)",
    "mi_z": "the estimate in units of marginal_std",
    "mi_z_ema": "EMA of mi_z (monitor.ema)",
    "log_n": "log of the number of prompts scored against: the largest MI possible",
    "mi_bound": "the bound of the distinct prompts (log of their count, identical ones merged)",
    "mi_null": "mean MI of the permutation null (reasoning shuffled across inputs; with sampled "
               "negatives, each reasoning's owner redrawn among the inputs it was scored under)",
    "mi_floor": "95th percentile of the permutation null: an MI at or below it is noise",
    "mi_p_value": "permutation p-value of the estimate",
    "mi_lo": "panel: lower end of the 95% bootstrap interval of mi (over prompts)",
    "mi_hi": "panel: upper end of that interval",
    "h_cond_lo": "panel: lower end of the 95% bootstrap interval of h_cond",
    "h_cond_hi": "panel: upper end of that interval",
    "healthy": "panel: 1 when mi_lo > mi_floor (the reasoning reads the input)",
    "n_prompts": "prompts (inputs) each sample is scored under: the prompts with reasoning, or "
                 "the own one plus the sampled negatives",
    "n_samples": "parsable reasoning samples of the measurement, always logged; below "
                 "monitor.min_samples (or 2 prompts) the scope logs its counts and no value: "
                 "no MI, retrieval, h_cond, mi_z, floor or bound",
    "retrieval_acc@<k>": "share of samples whose own prompt ranks in the top k under log p(z | x)",
    "retrieval_chance@<k>": "what retrieval_acc@<k> is by chance (identical prompts count as one)",
    "retrieval_acc@1_lo": "panel: lower end of the 95% bootstrap interval of retrieval_acc@1",
    "retrieval_acc@1_hi": "panel: upper end of that interval",
    "reasoning_tokens_mean": "tokens per scored reasoning",
    "reasoning_frac": "panel: share of sampled turns that held a <think> span to score",
    "token_entropy": "the sampling policy's per-token entropy estimate, to compare with",
    "turn": "later-turn panel: the turn measured (after the scripted opening turns)",
}

ACTION_MI = {
    "mi": "I(A; Z | X) in nats: how much the answer follows its own reasoning",
    "mi_bound": "the most an answer that follows its reasoning exactly can score on this batch",
    "log_k": "mean log of the group sizes (the bound without identical reasonings merged)",
    "mi_null": "mean of the null (answer-reasoning pairs shuffled within each group)",
    "mi_null_std": "std of that null",
    "mi_floor": "95th percentile of that null",
    "mi_p_value": "permutation p-value",
    "h_cond": "H(A | X, Z) in nats",
    "h_marginal": "H(A | X) in nats",
    "retrieval_acc@1": "share of answers whose own reasoning scores them best",
    "retrieval_chance@1": "what retrieval_acc@1 is by chance",
    "n_samples": "answers in groups of 2+, always logged; below monitor.min_samples the scope "
                 "logs its counts and no value",
    "n_groups": "groups (of one prompt) with 2+ answers",
    "n_excluded": "samples left out (env errors, a sample alone in its group)",
    "answer_tokens_mean": "tokens per scored answer",
}

GROUNDING = {
    "frac": "mean over the checkable reasonings of the share of their claims about the state "
            "that are true (the env's ground hook, checked before the turn's action)",
    "frac_lo": "lower end of the 95% percentile bootstrap interval of frac, over prompts (a "
               "batch's prompt: its group)",
    "frac_hi": "upper end of that interval",
    "n_samples": "checkable reasonings (the env's ground hook returned a number), always logged; "
                 "below monitor.min_samples (or 2 prompts) the scope logs its counts and no frac",
    "n_prompts": "prompts of those reasonings (the interval's unit)",
    "checkable_frac": "share of the scope's turns whose reasoning stated something the env could "
                      "check (a turn without reasoning counts as not checkable)",
}

CONTRAST = {
    "acc@1": "share of the samples whose own input ranks first among itself and the inputs that "
             "differ from it in this coordinate only (same map, every other coordinate equal; "
             "ties broken uniformly): a part of the state cannot satisfy it (the primary measure)",
    "chance@1": "mean of 1 / (1 + the sample's candidate values of the coordinate): what a "
                "reasoning blind to the coordinate gets",
    "acc@1_lo": "lower end of the 95% percentile bootstrap interval of acc@1, over prompts",
    "acc@1_hi": "upper end of that interval",
    "mi": "I(X_c; Z | X_-c) in nats: the MI estimate within the sample's equal-other-coordinates "
          "slice (0 for a reasoning blind to the coordinate)",
    "mi_bound": "mean log(slice size / inputs equivalent to the own one): the largest mi possible",
    "n_samples": "samples with at least one input differing in this coordinate only, always "
                 "logged; below monitor.min_samples (or 2 prompts) the scope logs its counts and "
                 "no value",
    "n_prompts": "the inputs of those samples (the interval's unit)",
}

FAMILIES: tuple[Family, ...] = (
    Family("Episodes", "Statistics of a batch of episodes: `rollout/` the step's training batch "
           "(unfiltered), `eval/` the held-out evaluation, `rollout/<env>/` and `eval/<env>/` each "
           "env of a mixture, `warm_start/demo/` the expert's demonstrations.",
           ("rollout/", "eval/", "rollout/<env>/", "eval/<env>/", "warm_start/demo/"), EPISODES),
    Family("Rollout", "Per training step, besides the episode statistics.", ("rollout/",), {
        "in_group_reward_std": "mean in-group reward spread of the step (the early stop's signal)",
        "worker_restarts": "rollout workers restarted during the step (their episodes rerun)",
    }),
    Family("Policy update", "The learner's update of the step (means over its optimizer steps).",
           ("actor/",), {
               "loss": "policy-gradient loss (PPO-clip)",
               "entropy": "mean per-token entropy of the policy on the trained tokens",
               "pg_clipfrac": "share of tokens whose ratio was clipped",
               "ppo_kl": "approximate KL between the behaviour and the updated policy",
               "kl_loss": "KL to the frozen reference (with algorithm.kl_coef > 0)",
               "grad_norm": "policy gradient norm before clipping",
               "logprob_gap": "mean |engine - learner| logprob on the trained tokens: a sync or "
                              "numerics bug shows here first",
               "lr": "learning rate of the step",
               "policy_version": "the policy version after the update",
               "nonfinite_skipped": "optimizer steps skipped for a NaN/inf loss or gradient",
               "optimizer_steps": "optimizer steps applied",
           }),
    Family("Critic", "PPO's value model (algorithm=ppo).", ("critic/",), {
        "vf_loss": "value loss",
        "grad_norm": "critic gradient norm before clipping",
    }),
    Family("MI monitor", "The input-reasoning MI and its companions, at five scopes: `collapse/` "
           "the first turn of the step's unfiltered batch, `collapse/turns/` one later turn per "
           "trajectory, `collapse/turn_uniform/` turns drawn uniformly "
           "(monitor.turn_uniform), `collapse/panel/` the fixed held-out probe panel, "
           "`collapse/panel/turns/` the panel at a later turn. Fields marked panel exist on the "
           "panel's scopes only.",
           ("collapse/", "collapse/turns/", "collapse/turn_uniform/", "collapse/panel/",
            "collapse/panel/turns/"), MI),
    Family("Action MI", "Does the answer follow the reasoning? On the first turn of the batch "
           "(`collapse/action/`) and of the panel (`collapse/panel/action/`).",
           ("collapse/action/", "collapse/panel/action/"), ACTION_MI),
    Family("Grounding", "Does the reasoning state the true state? Logged where the env has "
           "the optional ground(reasoning) hook (FrozenLake: the position; Sokoban: the player "
           "and the boxes stated; docs/reference/environments.md): `collapse/grounding/` the "
           "first turn of every step's unfiltered batch, `collapse/turns/grounding/` its later "
           "turns (all of them), `collapse/panel/grounding/` the first-turn probe panel, "
           "`collapse/panel/turns/grounding/` the later-turn panel.",
           ("collapse/grounding/", "collapse/turns/grounding/", "collapse/panel/grounding/",
            "collapse/panel/turns/grounding/"), GROUNDING),
    Family("MI contrast", "Can the reasoning tell apart inputs that share everything but one "
           "coordinate of the state (`<coord>`: the env's state_coordinates hook, FrozenLake "
           "`row`, `col`; Sokoban also `boxes`; ragen2/collapse/contrast.py)? "
           "`collapse/turns/contrast/<coord>/` the batch's later turns (candidates: other "
           "trajectories' turns on the same map), `collapse/panel/turns/contrast/<coord>/` the "
           "later-turn panel's contrast sets (monitor.panel_contrast: sibling states built to "
           "differ in one coordinate).",
           ("collapse/turns/contrast/<coord>/", "collapse/panel/turns/contrast/<coord>/"),
           CONTRAST),
    Family("Collapse control", "The alert, the rollback and the diagnosis.", ("collapse/",), {
        "alert": "1 when the panel's MI stayed at its floor while held-out success stalled",
        "rollback": "1 at a step that rolled back to the newest healthy checkpoint",
        "rollbacks": "rollbacks so far",
        "diagnosis": "at each evaluation: 0 healthy, 1 template collapse, 2 overfitting, "
                     "3 underfitting",
    }),
    Family("Group filter", "Which groups the filter kept.", ("filter/",), {
        "kept_ratio": "share of the step's groups kept for the update",
        "score_mean": "mean filter score (filter.metric) of the groups",
        "zero_std_groups": "groups whose rewards do not differ",
        "skipped_steps": "steps so far where the filter kept nothing (no update)",
    }),
    Family("Tiered SNR", "Tiered SNR filtering (filter=tiered).", ("snr/",), {
        "mean": "mean SNR over the prompts seen so far",
        "std": "std of their SNR (a warning below 0.3)",
        "frac_<grade>": "share of the seen prompts in that grade",
        "batch_frac_<grade>": "share of the step's groups in that grade",
        "threshold_low": "current low / medium SNR threshold",
        "threshold_high": "current medium / high SNR threshold",
        "signal_mean": "mean signal (reward spread over its running max)",
        "noise_mean": "mean template score τ (the noise)",
        "signal_scale": "the running max of the reward spread",
        "seen_prompts": "pool prompts with a history",
        "template_score_mean": "mean template score of the step's groups",
    }),
    Family("Gradient SNR", "Per reward-spread bucket (monitor.grad_snr_every): separate "
           "backward passes, no optimizer step.", ("grad_snr/b<i>/",), {
               "task_norm": "gradient norm of the task (policy-gradient) loss",
               "<term>_norm": "gradient norm of the regulariser as it enters the loss",
               "<term>_norm_raw": "the same without its coefficient",
               "reward_std": "mean σ_g of the bucket's groups",
           }),
    Family("Weight sync", "Learner to engines, then the probe.", ("sync/",), {
        "probe_logprob_gap": "mean |engine - learner| logprob on the probe continuation",
        "probe_logprob_gap_max": "largest gap over the engines",
        "probe_floor": "the probe's gap at the first sync, with identical weights (its floor)",
        "probe_threshold": "the gap above which a later sync stops the run: "
                           "max(sync.probe_floor_multiple x floor, sync.probe_tolerance)",
        "buckets": "buckets the weights travelled in",
        "checksum_tensors": "tensors whose checksums were compared per engine process (min)",
    }),
    Family("Bounded staleness", "trainer.max_staleness >= 1 only: the batch of step t comes "
           "from policy version max(0, t-1-k), generated while the learner updated "
           "(docs/concepts/async.md).", ("async/",), {
               "staleness_mean": "mean versions between the learner and the policy that "
                                 "generated each trajectory of the step's batch",
               "staleness_max": "the largest of them (at most trainer.max_staleness)",
               "stale_refused": "trajectories refused this step for being older than the bound "
                                "(never trained on; the step's batch was generated anew)",
               "queued": "batches generated ahead and waiting for their step after this one",
               "is_weight_mean": "mean truncated importance weight min(pi_prox / pi_behav, "
                                 "algorithm.tis_cap) over the trained tokens",
               "is_weight_max": "the largest importance weight before truncation",
               "is_truncated_frac": "share of the trained tokens whose weight the cap truncated",
           }),
    Family("Timing", "Wall-clock seconds.", ("timing/",), {
        "step_s": "the whole step",
        "rollout_s": "collecting the step's episodes (bounded staleness: the waits for them)",
        "overlap_s": "bounded staleness: the next batches' generation running during the update",
        "rollout_wait_s": "bounded staleness: the wait after the update for the next batches",
        "generate_s": "of which in the engine",
        "env_s": "of which in env calls",
        "update_s": "the learner update",
        "sync_s": "the weight sync",
        "probe_s": "the post-sync probe",
        "monitor_s": "the MI monitor",
        "panel_s": "the probe panel",
        "panel_turns_s": "the later-turn probe panel",
        "eval_s": "a held-out evaluation",
        "warm_start_s": "the warm start (or its cache load)",
    }),
    Family("Warm start", "Step 0's behaviour cloning.", ("warm_start/",), {
        "loss": "cross-entropy on the demonstrations' generated tokens",
        "token_acc": "share of those tokens predicted exactly",
        "grad_norm": "gradient norm of the last warm-start step",
        "nonfinite_skipped": "warm-start steps skipped for a NaN/inf loss or gradient",
        "demo_success": "success of the (noised) expert's demonstrations",
        "cached": "1 when the warm-started policy came from the cache",
        "skipped": "1 when no env has a demonstration() hook (no warm start)",
    }),
    Family("Trainer", "Run control.", ("trainer/",), {
        "early_stop": "1 at the step an early stop (trainer.early_stop) ended the run",
    }),
)

_SEGMENT = {"<env>": r"[A-Za-z0-9_.-]+", "<k>": r"\d+", "<i>": r"\d+",
            "<coord>": r"[A-Za-z0-9_]+", "<grade>": r"(?:low|medium|high)", "<term>": r"(?:entropy|kl)"}


def patterns() -> list[tuple[str, str, str]]:
    """``(key pattern, description, family title)`` for every documented key."""
    return [(prefix + name, text, fam.title) for fam in FAMILIES for prefix in fam.prefixes
            for name, text in fam.fields.items()]


@cache
def _compiled() -> list[tuple[re.Pattern, str]]:
    out = []
    for pattern, text, _ in patterns():
        rx = re.escape(pattern)
        for ph, seg in _SEGMENT.items():
            rx = rx.replace(re.escape(ph), seg)
        out.append((re.compile(rx), text))
    return out


def describe(key: str) -> str | None:
    """What ``key`` means, or None when the glossary has no entry for it."""
    if key == "step":
        return "the RL step (0 = the warm start and the evaluation before RL)"
    return next((text for rx, text in _compiled() if rx.fullmatch(key)), None)
