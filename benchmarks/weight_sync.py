"""Weight sync through Ray's object store: numpy arrays (what ragen2 ships) vs torch tensors.

Measures the median wall time of put + fetch-in-an-actor for a state dict of ``--params``
parameters, side by side in one run; the checked ratio is torch / numpy (why ragen2 ships numpy).
Usage::

    python benchmarks/weight_sync.py [--quick] [--params 10_000_000] [--repeats 7]
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import numpy as np
import ray
import torch

sys.path.insert(0, str(Path(__file__).parent))
import common  # noqa: E402


@ray.remote(num_cpus=0)
class Receiver:
    def take(self, weights) -> int:
        return sum(int(np.asarray(v).size) for v in weights.values())


def state_dict(params: int, layers: int = 8) -> dict[str, torch.Tensor]:
    per = params // layers
    side = int(per ** 0.5)
    return {f"layer{i}.weight": torch.randn(side, side) for i in range(layers)}


def median_time(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    args = common.parse_args(__doc__, lambda ap: (
        ap.add_argument("--params", type=int, default=10_000_000),
        ap.add_argument("--repeats", type=int, default=7)))
    if args.quick:
        args.repeats = min(args.repeats, 3)
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    rx = Receiver.remote()
    sd = state_dict(args.params)
    as_numpy = {k: v.numpy() for k, v in sd.items()}
    t_np = median_time(lambda: ray.get(rx.take.remote(ray.put(as_numpy))), args.repeats)
    t_pt = median_time(lambda: ray.get(rx.take.remote(ray.put(sd))), args.repeats)
    result = {"params": sum(v.numel() for v in sd.values()), "numpy_s": t_np, "torch_s": t_pt,
              "torch_over_numpy": t_pt / t_np}
    ray.shutdown()
    common.write_result("weight_sync", args, {"params": args.params, "repeats": args.repeats},
                        result, {"torch_over_numpy": result["torch_over_numpy"]},
                        {"torch_over_numpy": "higher"})


if __name__ == "__main__":
    main()
