"""``ragen2 memory [--gpu-gib G] [--host-gib G] OVERRIDES...``: does the config fit?

The per-GPU memory estimate of :mod:`ragen2.cluster.memory`, printed term by term, without a GPU;
for a CPU job (``cluster.device=cpu``) the host-memory estimate of every process
(:mod:`ragen2.cluster.host_memory`) on this machine, or on one of ``--host-gib`` GiB. An entry
point (``ragen2 memory``, alias ``ragen2 plan``; ``python -m ragen2.memory``): it composes the config
as ``ragen2 train`` does, so it sits above :mod:`ragen2.compose`, not in the cluster package.
"""

from __future__ import annotations

from typing import Optional

from ragen2.cluster.memory import GiB, H100_80GB, estimate_memory, fix_advice


def main(argv: Optional[list[str]] = None) -> int:
    """``ragen2 memory [--gpu-gib G] OVERRIDES...``: the per-GPU budget of a
    config on GPUs of G GiB (default: an 80 GB H100), before any GPU is reserved. Exit status 1
    when it does not fit, 2 for a bad config or an unknown model."""
    import argparse
    import sys

    from ragen2.config import ConfigError
    from ragen2.compose import load_config

    ap = argparse.ArgumentParser(prog="ragen2 memory", description=main.__doc__)
    ap.add_argument("--gpu-gib", type=float, default=H100_80GB / GiB,
                    help="memory of one GPU in GiB (torch's total_memory; default %(default).1f)")
    ap.add_argument("--host-gib", type=float, default=None,
                    help="CPU jobs: a machine of this many GiB, all of it available, the null "
                         "memory knobs planned for it (default: this machine's MemTotal and "
                         "MemAvailable)")
    ap.add_argument("overrides", nargs="*", help="ragen2-train overrides, e.g. "
                    "+experiment=ragen2_sokoban cluster=gpu_1")
    args = ap.parse_args(argv)
    try:
        if args.host_gib is None:
            cfg = load_config(args.overrides)
        else:  # the null memory knobs planned for that machine, not this one
            from ragen2.cluster import host_memory as hm
            from ragen2.cluster.host import HostMemory

            size = int(args.host_gib * GiB)
            with hm.planning_host(HostMemory(size, size)):
                cfg = load_config(args.overrides)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if cfg.cluster.device != "cuda":
        return _host(cfg, args.host_gib)
    b = estimate_memory(cfg, int(args.gpu_gib * GiB))
    if b is None:
        print(f"unknown model shape for {cfg.model.path or cfg.model.name}: no config.json found "
              "(download it first) and not in ragen2.cluster.memory.KNOWN_SHAPES", file=sys.stderr)
        return 2
    print(b.describe())
    return _verdict(b, lambda: fix_advice(cfg, b))


def _host(cfg, host_gib: Optional[float]) -> int:  # noqa: ANN001  (a Config)
    """The CPU job's host-memory budget (printed); 0 fits, 1 does not, 2 unknown."""
    import sys

    from ragen2.cluster import host_memory as hm
    from ragen2.cluster.host import HostMemory, host_memory

    host = (HostMemory(int(host_gib * GiB), int(host_gib * GiB)) if host_gib is not None
            else host_memory())
    b = hm.estimate_host_memory(cfg, host) if host is not None else None
    if b is None:
        print(f"no host-memory estimate for {cfg.model.path or cfg.model.name} (unknown model "
              "shape, or /proc/meminfo unreadable)", file=sys.stderr)
        return 2
    print(b.describe())
    print(f"planned: learner.micro_batch_tokens={cfg.learner.micro_batch_tokens}, "
          f"learner.activation_checkpointing={cfg.learner.activation_checkpointing}, "
          f"model.dtype={cfg.model.dtype}"
          + (f", engine.hf_max_batch={cfg.engine.hf_max_batch}" if cfg.engine.name == "hf" else ""))
    return _verdict(b, lambda: hm.fix_advice(cfg, b))


def _verdict(b, fix) -> int:  # noqa: ANN001  (a GPU or host budget; fix() its advice)
    """Print a budget's warnings and whether it fits; 0 fits, 1 does not."""
    for w in b.warnings:
        print(f"warning: {w}")
    if b.fits:
        print("fits")
        return 0
    print(f"does not fit: {'; '.join(b.problems)}\n  fix: {fix()}")
    return 1


if __name__ == "__main__":
    raise SystemExit(main())
