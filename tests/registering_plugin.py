"""A plugin module for tests/test_plugins.py: one registration in each registry a plugin may add
to from the ``algorithm`` section, under names no built-in has. ``REGISTERED`` lists them so the
tests can take them out again (the registries are process-wide)."""

from __future__ import annotations

import torch

from ragen2.algos import ADVANTAGE_ESTIMATORS, AdvantageEstimator
from ragen2.algos.aggregation import LOSS_AGG_MODES
from ragen2.algos.gating import REGULARISER_GATES
from ragen2.algos.kl import KL_PENALTIES

ADV, KL, AGG, GATE = ("plugin_doubled_grpo", "plugin_abs_k1", "plugin_token_sum",
                      "plugin_first_half")


def doubled_grpo(x, algorithm):
    adv, _ = ADVANTAGE_ESTIMATORS.get("grpo").assign(x, algorithm)
    return 2.0 * adv, None


def abs_k1(logprobs, ref_logprobs):
    """|log pi - log pi_ref|."""
    return (logprobs - ref_logprobs).abs()


def token_sum(masked, mask, **_):
    """The plain sum of the masked-in tokens' losses."""
    return masked.sum()


def first_half(rewards, group_ids, threshold):
    """Weight 1 on the first half of the samples, 0 on the rest."""
    n = len(torch.as_tensor(rewards).reshape(-1))
    return (torch.arange(n) < n // 2).to(torch.float32)


ADVANTAGE_ESTIMATORS.register(ADV)(AdvantageEstimator(doubled_grpo))
KL_PENALTIES.register(KL)(abs_k1)
LOSS_AGG_MODES.register(AGG)(token_sum)
REGULARISER_GATES.register(GATE)(first_half)

REGISTERED = [(ADVANTAGE_ESTIMATORS, ADV), (KL_PENALTIES, KL), (LOSS_AGG_MODES, AGG),
              (REGULARISER_GATES, GATE)]
