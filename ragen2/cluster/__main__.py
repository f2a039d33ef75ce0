"""``python -m ragen2.cluster [--gpu-gib G] OVERRIDES...``: does the config fit its GPUs?

The per-GPU memory estimate of :mod:`ragen2.cluster.memory`, printed term by term, without a GPU.
"""

from ragen2.cluster.memory import main

raise SystemExit(main())
