"""The generated blocks of the results pages: one function per block, each returning Markdown
built from committed data (``benchmarks/results/``, ``benchmarks/collapse_study/``).

:data:`BLOCKS` maps a block's name, as its marker names it (``<!-- generated: NAME ARG... -->``),
to its function; the marker's arguments are passed to it as strings. ``benchmarks/pages.py``
rewrites the blocks in place and checks them.
"""

from __future__ import annotations

from typing import Callable

from . import (account, collapse, countdown, multiturn, real_models, remote_env, robustness,
               smollm2, speed, tiers, trl_smollm2)
from .data import table


def readme_commands() -> str:
    """The README's table of the two commands and the SmolLM2 preset."""
    return table(["command", "wall time", "result"],
                 [robustness.readme_train_row(), tiers.readme_test_row(),
                  smollm2.readme_smollm2_row()])


BLOCKS: dict[str, Callable[..., str]] = {
    "readme-commands": readme_commands,
    "tier1-cold": tiers.tier1_cold,
    "benchmarks-table": speed.benchmarks_table,
    "robustness-table": robustness.robustness_table,
    "robustness-other-seeds": robustness.robustness_other_seeds,
    "robustness-staleness": robustness.robustness_staleness,
    "getting-started-train": robustness.getting_started_train,
    "pair-table": robustness.pair_table,
    "near-verdict": robustness.near_verdict,
    "label-machines": robustness.label_machines,
    "smollm2-table": smollm2.smollm2_table,
    "smollm2-split": smollm2.smollm2_split,
    "smollm2-earlier": smollm2.smollm2_earlier,
    "smollm2-replies": smollm2.smollm2_replies,
    "smollm2-mi": smollm2.smollm2_mi,
    "smollm2-sync": smollm2.smollm2_sync,
    "smollm2-time": smollm2.smollm2_time,
    "smollm2-memory": smollm2.smollm2_memory,
    "smollm2-multiturn-tasks": multiturn.smollm2_multiturn_tasks,
    "smollm2-multiturn-example": multiturn.smollm2_multiturn_example,
    "smollm2-countdown": countdown.smollm2_countdown,
    "smollm2-countdown-instruments": countdown.smollm2_countdown_instruments,
    "smollm2-countdown-attempts": countdown.smollm2_countdown_attempts,
    "smollm2-trl": trl_smollm2.smollm2_trl,
    "speed-setup": real_models.speed_setup,
    "speed-table": real_models.speed_table,
    "speed-step": real_models.speed_step,
    "speed-correctness": real_models.speed_correctness,
    "gridworld-setup": real_models.gridworld_setup,
    "gridworld-table": real_models.gridworld_table,
    "gridworld-reading": real_models.gridworld_reading,
    "instruments": real_models.instruments,
    "study3-status": collapse.study3_status,
    "study3-answers": collapse.study3_answers,
    "study2-setup": collapse.study2_setup,
    "study2-findings": collapse.study2_findings,
    "study1-setup": collapse.study1_setup,
    "study1-findings": collapse.study1_findings,
    # docs/results/step-account.md
    "step-account-phases": account.step_account_phases,
    "step-account-job": account.step_account_job,
    "step-account-update": account.step_account_update,
    "update-ab": account.update_ab,
    "make-train-ab": account.make_train_ab,
    "compile-probe": account.compile_probe,
    "attention-backward": account.attention_backward,
    "scorer-cascade": account.scorer_cascade,
    # docs/reference/env-protocol.md
    "remote-env-job": remote_env.remote_env_job,
    "remote-env-latency": remote_env.remote_env_latency,
}
