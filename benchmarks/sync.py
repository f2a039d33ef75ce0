"""Weight-sync time against model size: learner -> object store -> vLLM, as ``sync.strategy=
object_store`` (the CPU default) does it.

For tiny Qwen2 models of growing hidden size and depth (``model.tiny.*``, built and cached like
the default one): a ``LearnerRank`` (world size 1, FSDP2) in this process and a
``RolloutWorker`` Ray actor running the vLLM engine, as in a real run. Timed per sync:

* ``put_s``: the learner half, ``ragen2.sync.object_store.put_buckets`` (gather every full
  parameter, numpy buckets of ``sync.bucket_mb``, ``ray.put``);
* ``load_s``: the worker half, ``load_buckets`` run in the actor (fetch the buckets, vLLM
  ``reload_weights`` over the stream, prefix-cache reset), as the driver waits for it;
* ``copy_cpu_s`` (baseline): one in-memory copy of the same bytes (``numpy.copyto`` of every
  array into an allocated buffer), the least any transfer costs.

``sync_over_copy`` (checked at the largest size) compares CPU seconds: the learner's (one
thread) plus the worker's, over the copy's; wall seconds, which other processes on the machine
inflate, are reported beside them. Medians over ``repeats`` syncs after one warm-up. The
post-sync probe is not included.

Usage::

    python benchmarks/sync.py [--quick]
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import common  # noqa: E402

FULL = {"sizes": [[128, 4], [256, 6], [512, 8], [1024, 12]], "repeats": 5}
QUICK = {"sizes": [[128, 4], [512, 8]], "repeats": 2}


def overrides(hidden: int, layers: int) -> list[str]:
    return [f"model.tiny.hidden_size={hidden}", f"model.tiny.num_layers={layers}",
            f"model.tiny.num_heads={max(4, hidden // 128)}", "model.tiny.num_kv_heads=2",
            f"model.tiny.intermediate_size={4 * hidden}", "cluster.learner_world_size=1",
            "engine=vllm"]


def one_size(hidden: int, layers: int, repeats: int) -> dict:
    import numpy as np
    import ray

    from ragen2.learner.rank import LearnerRank
    from ragen2.controller import learner_settings
    from ragen2.rollout.worker import RolloutWorker
    from ragen2.sync.object_store import load_buckets, put_buckets
    from ragen2.train import ensure_ray, load_config, resolve_model_path

    cfg = load_config(overrides(hidden, layers))
    ensure_ray(cfg)
    path = resolve_model_path(cfg)
    rank = LearnerRank(cfg, path, 0, 1, threads=1, settings=learner_settings(cfg))
    rank.setup("127.0.0.1", 0)  # one rank: its store binds a port the OS assigns
    worker = ray.remote(RolloutWorker).options(num_cpus=0).remote(cfg, path, 0, 1)
    ray.get(worker.policy_version.remote())
    weights = rank.policy_weights()
    dst = {k: np.ones_like(a) for k, a in weights.items()}  # touched: no page faults when timed

    def copy_all() -> None:
        for k, a in weights.items():
            np.copyto(dst[k], a)
    mb = sum(v.nbytes for v in weights.values()) / 2**20
    params = sum(v.size for v in weights.values())
    bucket = int(cfg.sync.bucket_mb * 2**20)

    def timed_load(w, refs, version):  # a closure: Ray ships it to the actor by value
        import time

        t0, c0 = time.perf_counter(), time.process_time()
        load_buckets(w, refs, version)
        return time.perf_counter() - t0, time.process_time() - c0

    put, put_cpu, load, inner, load_cpu, copy = [], [], [], [], [], []
    for v in range(1, repeats + 2):  # version 1 is the warm-up
        t0, c0 = time.perf_counter(), time.process_time()
        refs = put_buckets(rank, bucket)
        t_put, c_put = time.perf_counter() - t0, time.process_time() - c0
        t0 = time.perf_counter()
        t_inner, c_load = ray.get(worker.run.remote(timed_load, refs, v))
        t_load = time.perf_counter() - t0
        del refs
        c_copy = common.median([common.cpu_timed(copy_all)[1] for _ in range(5)])
        if v > 1:
            put.append(t_put), load.append(t_load), inner.append(t_inner), copy.append(c_copy)
            put_cpu.append(c_put), load_cpu.append(c_load)
    ray.kill(worker)
    rank.shutdown()
    total = [a + b for a, b in zip(put, load)]
    total_cpu = [a + b for a, b in zip(put_cpu, load_cpu)]
    return {"hidden_size": hidden, "layers": layers, "params": int(params), "mb": mb,
            "put_s": common.median(put), "load_s": common.median(load),
            "load_in_actor_s": common.median(inner), "sync_s": common.median(total),
            "sync_cpu_s": common.median(total_cpu), "copy_cpu_s": common.median(copy),
            "mb_per_s": mb / common.median(total),
            "sync_over_copy": common.median(total_cpu) / common.median(copy),
            "samples": {"sync_s": total, "sync_cpu_s": total_cpu, "copy_cpu_s": copy}}


def main() -> None:
    args = common.parse_args(__doc__)
    s = QUICK if args.quick else FULL
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    rows = []
    for hidden, layers in s["sizes"]:
        rows.append(one_size(hidden, layers, s["repeats"]))
        print({k: round(v, 4) if isinstance(v, float) else v for k, v in rows[-1].items()
               if k != "samples"}, flush=True)
    mb = [r["mb"] for r in rows]
    fits = {"seconds_per_100mb": common.fit_slope(mb, [r["sync_s"] for r in rows])[0] * 100,
            "exponent_vs_mb": common.fit_exponent(mb, [r["sync_s"] for r in rows])}
    print(fits, flush=True)
    ratios = {"sync_over_copy_largest": rows[-1]["sync_over_copy"]}
    common.write_result("sync", args, {**s, "strategy": "object_store", "engine": "vllm",
                                       "bucket_mb": 256}, {"sizes": rows, "fits": fits},
                        ratios, {k: "lower" for k in ratios})


if __name__ == "__main__":
    main()
