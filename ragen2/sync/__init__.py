"""Weight sync learner -> rollout engines (``sync.strategy``) and the post-sync probe."""

from ragen2.sync import cuda_ipc, nccl, object_store  # noqa: F401  (registers the strategies)
from ragen2.sync.base import (WEIGHT_SYNCS, WeightSync, WeightSyncError, iter_buckets, make_sync,
                              resolve_strategy)
from ragen2.sync.probe import ProbePolicy, check_probe, probe_ids, run_probe

__all__ = ["WEIGHT_SYNCS", "WeightSync", "WeightSyncError", "iter_buckets", "make_sync",
           "ProbePolicy", "check_probe", "probe_ids", "resolve_strategy", "run_probe"]
