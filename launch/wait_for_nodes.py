"""Wait until a Ray cluster has N alive nodes (and optionally G GPUs); exit 1 on timeout.

Usage: python launch/wait_for_nodes.py ADDRESS NODES [--gpus G] [--timeout S]
Used by launch/slurm/ragen2.sbatch before it starts training; prints the cluster's nodes.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time


def alive(ray) -> list[dict]:  # noqa: ANN001  (ray: the module)
    return [n for n in ray.nodes() if n.get("Alive")]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("address", help="HEAD_IP:PORT of the Ray cluster (or auto)")
    p.add_argument("nodes", type=int, help="alive nodes to wait for")
    p.add_argument("--gpus", type=int, default=0, help="GPUs to wait for in total")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds (default 300)")
    args = p.parse_args(argv)
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    # ray.init may wait long for a head that never came up: bound the whole wait
    signal.signal(signal.SIGALRM, lambda *_: sys.exit(
        f"wait_for_nodes: no Ray cluster at {args.address} after {args.timeout:g} s"))
    signal.alarm(int(args.timeout) + 1)
    import ray

    ray.init(address=args.address, include_dashboard=False, log_to_driver=False,
             logging_level="WARNING")
    deadline = time.monotonic() + args.timeout
    while True:
        nodes = alive(ray)
        gpus = sum(int(n.get("Resources", {}).get("GPU", 0)) for n in nodes)
        if len(nodes) >= args.nodes and gpus >= args.gpus:
            break
        if time.monotonic() > deadline:
            print(f"wait_for_nodes: {len(nodes)}/{args.nodes} nodes and {gpus}/{args.gpus} GPUs "
                  f"after {args.timeout:g} s", file=sys.stderr)
            return 1
        time.sleep(2)
    for n in nodes:
        res = n.get("Resources", {})
        print(f"ray node {n.get('NodeManagerAddress')}: {res.get('GPU', 0):g} GPU, "
              f"{res.get('CPU', 0):g} CPU")
    signal.alarm(0)
    ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
