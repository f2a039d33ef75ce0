"""``python -m ragen2.cluster [--gpu-gib G] OVERRIDES...``: does the config fit its GPUs?

The per-GPU memory estimate of :mod:`ragen2.cluster.memory`, printed term by term, without a GPU.
"""

from __future__ import annotations

from typing import Optional

from ragen2.cluster.memory import GiB, H100_80GB, estimate_memory, fix_advice


def main(argv: Optional[list[str]] = None) -> int:
    """``python -m ragen2.cluster [--gpu-gib G] OVERRIDES...``: the per-GPU budget of a
    config on GPUs of G GiB (default: an 80 GB H100), before any GPU is reserved. Exit status 1
    when it does not fit, 2 for a bad config or an unknown model."""
    import argparse
    import sys

    from ragen2.config import ConfigError
    from ragen2.train import load_config

    ap = argparse.ArgumentParser(prog="python -m ragen2.cluster", description=main.__doc__)
    ap.add_argument("--gpu-gib", type=float, default=H100_80GB / GiB,
                    help="memory of one GPU in GiB (torch's total_memory; default %(default).1f)")
    ap.add_argument("overrides", nargs="*", help="ragen2-train overrides, e.g. "
                    "+experiment=ragen2_sokoban cluster=gpu_1")
    args = ap.parse_args(argv)
    try:
        cfg = load_config(args.overrides)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if cfg.cluster.device != "cuda":
        print("cluster.device=cpu: nothing to estimate (pick a cluster=gpu_* preset)", file=sys.stderr)
        return 2
    b = estimate_memory(cfg, int(args.gpu_gib * GiB))
    if b is None:
        print(f"unknown model shape for {cfg.model.path or cfg.model.name}: no config.json found "
              "(download it first) and not in ragen2.cluster.memory.KNOWN_SHAPES", file=sys.stderr)
        return 2
    print(b.describe())
    for w in b.warnings:
        print(f"warning: {w}")
    if b.fits:
        print("fits")
        return 0
    print(f"does not fit: {'; '.join(b.problems)}\n  fix: {fix_advice(cfg, b)}")
    return 1


if __name__ == "__main__":
    raise SystemExit(main())
