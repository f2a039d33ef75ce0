"""One RL run: the training loop (:mod:`.loop`) over components with one job each.

==================  ================================================================
``loop``            :class:`Controller` (``train_step``: rollouts -> watch -> filter ->
                    update -> push) and :func:`run` (the steps, evaluations, checkpoints)
``actors``          the Ray actors: rollout workers and learner ranks, placed and started
``problems``        which problems each kind of episode draws (the problem split)
``rollouts``        each step's batch, and the queue of batches generated ahead
``weights``         the policy version the engines hold: push, checks, re-sync
``watch``           batch monitor, probe panels (``panels``), collapse alert, rollback,
                    gradient SNR, diagnosis
``warm_start``      behaviour cloning before RL, and its cache
``evaluation``      the held-out evaluation during training
``checkpoints``     writing, pruning and the rollback target
``episodes``        a batch's statistics and the env-error budget
``guards``          the stop rules for steps that train nothing
==================  ================================================================
"""

from ragen2.controller.actors import learner_settings
from ragen2.controller.episodes import (EnvFailureError, check_env_errors, group_rewards,
                                        rollout_metrics, success_rate)
from ragen2.controller.guards import TrainingStopped, count_nonfinite
from ragen2.controller.loop import Controller, run

__all__ = ["Controller", "EnvFailureError", "TrainingStopped", "check_env_errors",
           "count_nonfinite", "group_rewards", "learner_settings", "rollout_metrics", "run",
           "success_rate"]
