"""Host memory of the FSDP2 learner's set-up: meta-device initialisation vs every rank loading.

Two gloo ranks (two spawned processes, one thread each) run ``LearnerRank.setup`` -- policy,
reference (``algorithm.kl_coef > 0``) and, for PPO, the critic -- on a random model of
Qwen2-0.5B's shape in fp32 (``model=qwen2_0.5b_random``: 0.36B parameters, 1.4 GB; ``--quick``: a
~20M-parameter model). Each (scenario, path) runs in a fresh pair of processes, so the peaks are
those of one set-up:

* ``former``: every rank loads the full checkpoint (``from_pretrained``), moves it to its device
  and shards it, for each model (``LearnerRank.meta_init = False``);
* ``meta``: only rank 0 loads it; every rank builds the models on the meta device, shards them
  and receives each full tensor from rank 0 (``set_model_state_dict(..., broadcast_from_rank0=True)``).

Each runs from two checkpoints of the same weights: ``fp32`` (what ragen2's built-in models save:
``from_pretrained`` memory-maps the file and the fp32 tensors are views of it, so the former path's
full copies were page cache shared by the ranks) and ``bf16`` (how pretrained models ship: the
learner loads fp32 master weights, so every full copy is converted into memory of its own).

Per rank: ``peak_rss_mb`` is the kernel's high-water mark of the resident set (``VmHWM``,
including the checkpoint's memory-mapped pages the loader touched), ``peak_anon_mb`` / ``peak_file_mb`` the
largest anonymous / file-backed resident memory sampled every 20 ms (anonymous: what the process
itself allocated; file-backed: the checkpoint's mapped pages, shared between processes),
``base_rss_mb`` the resident set after the imports, before ``setup``; ``after_rss_mb`` once set up.
The bf16 runs are repeated with glibc's mmap threshold fixed at 128 KiB (``*_mmap128k``): by
default glibc raises the threshold as large blocks are freed (up to 32 MB), and freed tensors of
a 0.5B model (~17 MB each) then stay resident in the heap -- the meta path's per-tensor broadcast
buffers on rank 1, rank 0's source copy after the set-up; the fixed threshold shows the memory
actually held.
The logits of rank 0 on a fixed input must agree between the two paths (``max_logit_diff``).
On the CPU the shards live in host memory too, so the ``meta`` figures still include each rank's
shards (half of every model) and rank 0's one full copy; on a GPU those shards go to the device.

Usage::

    python benchmarks/fsdp_init_memory.py [--quick]
"""

from __future__ import annotations

import json
import multiprocessing as mp
import sys
import threading
import time
from pathlib import Path
from typing import Any

from ragen2.cluster.rendezvous import SpawnRendezvous

sys.path.insert(0, str(Path(__file__).parent))
import common  # noqa: E402

FULL_MODEL = ["model=qwen2_0.5b_random", "model.dtype=float32"]
QUICK_MODEL = ["model.tiny.hidden_size=512", "model.tiny.num_layers=6", "model.tiny.num_heads=8",
               "model.tiny.num_kv_heads=2", "model.tiny.intermediate_size=1536",
               "model.tiny.vocab_size=8192"]
SCENARIOS = {"grpo_kl": ["algorithm.kl_coef=0.1"],  # policy + reference
             "ppo_kl": ["algorithm.kl_coef=0.1", "algorithm.adv_estimator=gae"]}  # + critic
#: glibc's default raises its mmap threshold as large blocks are freed (up to 32 MB), after which
#: freed tensors stay resident in the heap; a fixed threshold returns them (bf16 checkpoints only)
MALLOC = {"default": {}, "mmap128k": {"MALLOC_MMAP_THRESHOLD_": "131072"}}
IDS = [[5, 17, 40, 3, 99, 12, 8, 230, 41, 41, 7, 300]]


def _rank(rank: int, path: str, overrides: list[str], meta: bool, rdv: Any, out: str) -> None:
    import torch

    torch.set_num_threads(1)
    from ragen2.learner.rank import LearnerRank
    from ragen2.controller import learner_settings
    from ragen2.train import load_config

    cfg = load_config(["cluster.learner_world_size=2", *overrides])
    base = common.kib("VmRSS")
    peak_anon, peak_file = [common.kib("RssAnon")], [common.kib("RssFile")]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.02):
            peak_anon[0] = max(peak_anon[0], common.kib("RssAnon"))
            peak_file[0] = max(peak_file[0], common.kib("RssFile"))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    LearnerRank.meta_init = meta
    r = LearnerRank(cfg, path, rank, 2, threads=1, settings=learner_settings(cfg))
    port = rdv.port(rank, lambda: r.address("127.0.0.1")[1])  # rank 0's store, bound by the OS
    t0 = time.perf_counter()
    r.setup("127.0.0.1", port)
    setup_s = time.perf_counter() - t0
    done.set()
    sampler.join()
    peak_anon[0] = max(peak_anon[0], common.kib("RssAnon"))
    res = {"base_rss_mb": base / 1024, "peak_rss_mb": common.kib("VmHWM") / 1024,
           "peak_anon_mb": peak_anon[0] / 1024, "peak_file_mb": peak_file[0] / 1024,
           "after_rss_mb": common.kib("VmRSS") / 1024, "after_anon_mb": common.kib("RssAnon") / 1024,
           "setup_s": setup_s}
    with torch.no_grad():
        logits = r.model(input_ids=torch.tensor(IDS), use_cache=False).logits
    if rank == 0:
        torch.save(logits, f"{out}/logits.pt")
    r.shutdown()
    Path(out, f"rank{rank}.json").write_text(json.dumps(res))


def _pair(path: str, overrides: list[str], meta: bool, out: Path, env: dict | None = None) -> dict:
    import os

    out.mkdir(parents=True, exist_ok=True)
    ctx = mp.get_context("spawn")
    rdv = SpawnRendezvous(2, ctx)
    procs = [ctx.Process(target=_rank, args=(r, path, overrides, meta, rdv, str(out)))
             for r in range(2)]
    saved = dict(os.environ)
    os.environ.update(env or {})  # read by the children's C library as they start
    try:
        for p in procs:
            p.start()
    finally:
        os.environ.clear()
        os.environ.update(saved)
    for p in procs:
        p.join(timeout=1800)
    if [p.exitcode for p in procs] != [0, 0]:
        raise RuntimeError(f"ranks exited {[p.exitcode for p in procs]} ({overrides}, meta={meta})")
    return {f"rank{r}": json.loads((out / f"rank{r}.json").read_text()) for r in range(2)}


def bf16_copy(path: str, out: Path) -> str:
    """The checkpoint saved in bf16, as pretrained models ship (the learner loads it in fp32)."""
    import shutil

    import torch

    from ragen2.models.loading import load_causal_lm

    load_causal_lm(path).to(torch.bfloat16).save_pretrained(out)
    for f in Path(path).iterdir():  # tokenizer and the rest
        if not (out / f.name).exists():
            shutil.copy(f, out / f.name)
    return str(out)


def main() -> None:
    import tempfile

    import torch

    args = common.parse_args(__doc__)
    model = QUICK_MODEL if args.quick else FULL_MODEL
    path = common.model_path(model)
    from ragen2.models.loading import load_causal_lm

    n_params = sum(p.numel() for p in load_causal_lm(path).parameters())
    results: dict = {"params": n_params, "model_fp32_mb": n_params * 4 / 2**20}
    ratios, better = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        checkpoints = {"fp32": path, "bf16": bf16_copy(path, Path(tmp, "bf16"))}
        runs = [(ckpt, scenario, malloc) for ckpt in checkpoints for scenario in SCENARIOS
                for malloc in MALLOC if malloc == "default" or ckpt == "bf16"]
        for ckpt, scenario, malloc in runs:
            extra, ckpt_path = SCENARIOS[scenario], checkpoints[ckpt]
            name = f"{ckpt}_{scenario}" + ("" if malloc == "default" else f"_{malloc}")
            arms: dict = {}
            for label, meta in (("former", False), ("meta", True)):
                print(f"  {name} {label} ...", flush=True)
                arms[label] = _pair(ckpt_path, [*model, *extra], meta, Path(tmp, name, label),
                                    MALLOC[malloc])
            logits = {k: torch.load(Path(tmp, name, k, "logits.pt")) for k in arms}
            arms["max_logit_diff"] = float((logits["meta"] - logits["former"]).abs().max())
            for r in ("rank0", "rank1"):
                for key in ("peak_rss_mb", "peak_anon_mb"):
                    k = f"{name}_{r}_{key.removesuffix('_mb')}_meta_over_former"
                    ratios[k] = arms["meta"][r][key] / arms["former"][r][key]
                    better[k] = "lower"
            results[name] = arms
            for label in ("former", "meta"):
                print(f"  {name} {label}: " + ", ".join(
                    f"{r} peak RSS {arms[label][r]['peak_rss_mb']:.0f} MB (anon "
                    f"{arms[label][r]['peak_anon_mb']:.0f}, file {arms[label][r]['peak_file_mb']:.0f}, "
                    f"base {arms[label][r]['base_rss_mb']:.0f})" for r in ("rank0", "rank1")),
                    flush=True)
    settings = {"model": model, "checkpoints": list(checkpoints), "scenarios": SCENARIOS,
                "malloc": MALLOC, "world_size": 2, "backend": "gloo", "threads_per_rank": 1}
    common.write_result("fsdp_init_memory", args, settings, results, ratios, better)


if __name__ == "__main__":
    main()
