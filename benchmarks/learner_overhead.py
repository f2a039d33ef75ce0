"""Learner overhead: one ragen2 update (``LearnerRank.update``, FSDP2) vs a plain PyTorch loop.

Both sides get the same tiny model, the same batch (``rows`` sequences of up to ``length``
tokens, ~40% of them trained, rewards in groups of 4) and the default GRPO settings: two
mini-batches (one AdamW step each), ``micro_batch_size`` rows per forward/backward, token-mean
PPO-clip (clip-higher, dual clip), gradient clipping. The plain loop is what one would write by
hand: ``model(...)``, log-softmax + gather, the PPO-clip loss inline, ``backward``,
``clip_grad_norm_``, ``AdamW.step`` -- with the shortcuts a careful hand-written loop takes too
(old logprobs of the first mini-batch come from its own forward; micro-batches are trimmed to
their longest row; logits only from the first trained column, ``logits_to_keep``) and ragen2's
row order (a group's rows together within each mini-batch), so both sides run the same forwards
and backwards. The rows share no prompt, so ragen2's shared-prefix forward (which the plain loop
lacks) stays off: this measures the framework's overhead, not that saving (``trl`` shows it).
One update from the
same weights must give the same weights up to float rounding (``max_weight_diff``), which
checks that the two do the same maths.

* world size 1: ``LearnerRank`` in this process (gloo group of one) and the plain loop, both on
  one thread, alternating, the first round a warm-up. The checked ratio uses CPU time
  (``time.process_time``): with one thread it equals the wall time on a quiet machine and is
  not inflated when other processes share the cores; the wall-time ratio is reported too.
  Goal: ragen2 / plain <= 1.10.
* world size 2: two spawned processes, one ``LearnerRank`` each with one thread (what ``make
  train`` runs on 2 cores): wall time of an update (the slower rank) over the world-1 plain
  loop's wall time. Ideal data parallelism on two cores would give 0.5: each rank does half the
  rows; FSDP2's all-gathers and reduce-scatters over gloo and the smaller per-rank batches
  make up the rest. ``world1.ragen2_update_all_cores_s`` (one rank, one thread per core) is the
  other way to use the same cores.

Usage::

    python benchmarks/learner_overhead.py [--quick]
"""

from __future__ import annotations

import multiprocessing as mp
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import common  # noqa: E402

FULL = {"rows": 32, "length": 512, "repeats": 5}
QUICK = {"rows": 16, "length": 256, "repeats": 2}
OVERRIDES = ["algorithm.lr_warmup_steps=1"]  # a constant lr: the plain loop needs no schedule


def make_batch(rows: int, length: int, vocab: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    lens = rng.integers(length // 2, length + 1, rows)
    attn = (np.arange(length)[None] < lens[:, None]).astype(np.int64)
    ids = rng.integers(3, vocab, (rows, length)) * attn
    mask = attn * (np.arange(length)[None] >= 64) * (rng.random((rows, length)) < 0.45)
    return {"input_ids": ids, "attention_mask": attn, "loss_mask": mask.astype(np.int64),
            "logprobs": np.full((rows, length), -2.0, np.float32),
            "token_rewards": np.zeros((rows, length), np.float32),
            "rewards": rng.integers(0, 2, rows).astype(np.float32),
            "group_ids": np.arange(rows) // 4, "policy_version": np.zeros(rows, np.int64)}


class PlainLoop:
    """The update written directly in PyTorch (no FSDP, no ragen2 learner code)."""

    def __init__(self, cfg, path: str) -> None:
        import torch

        from ragen2.models.loading import load_causal_lm

        self.a = cfg.algorithm
        self.model = load_causal_lm(path, dtype="float32", attn_implementation="sdpa")
        self.model.train()
        self.optim = torch.optim.AdamW(self.model.parameters(), lr=self.a.lr,
                                       weight_decay=self.a.weight_decay)
        self.seed = cfg.seed

    def logprobs(self, ids, attn, mask):
        """Logprobs from the first trained column on (logits_to_keep: what TRL and verl do)."""
        import torch

        first = 1 + int(torch.nonzero(mask[:, 1:].any(0))[0])
        keep = ids.shape[1] - first + 1
        logits = self.model(input_ids=ids, attention_mask=attn, use_cache=False,
                            logits_to_keep=keep).logits[:, :-1]
        lp = torch.log_softmax(logits.float(), -1).gather(-1, ids[:, first:, None]).squeeze(-1)
        return torch.cat([torch.zeros_like(lp[:, :1]).expand(-1, first), lp], 1)

    def update(self, batch: dict[str, np.ndarray], step: int) -> None:
        import torch

        from ragen2.learner.microbatch import mini_batches

        a, n = self.a, len(batch["rewards"])
        r, g = torch.tensor(batch["rewards"]), torch.tensor(batch["group_ids"])
        mean = torch.zeros(int(g.max()) + 1).index_add_(0, g, r) / torch.bincount(g)
        std = torch.stack([r[g == k].std() for k in range(len(mean))])
        adv = (r - mean[g]) / (std[g] + 1e-6)
        gen = torch.Generator().manual_seed(self.seed * 1_000_003 + step)
        perm = torch.randperm(n, generator=gen).tolist()  # ragen2's mini-batches and row order
        minis = [np.asarray(mb) for mb in mini_batches(perm, batch["group_ids"].tolist(),
                                                       a.ppo_mini_batches)]

        def micro(rows):
            width = int(batch["attention_mask"][rows].sum(1).max())
            return [torch.from_numpy(np.ascontiguousarray(batch[k][rows, :width]))
                    for k in ("input_ids", "attention_mask", "loss_mask")]

        old = {}
        with torch.no_grad():  # old logprobs of the later mini-batches, before the policy moves
            for mi, mb in enumerate(minis[1:], 1):
                for ui in range(0, len(mb), a.micro_batch_size):
                    ids, attn, mask = micro(mb[ui:ui + a.micro_batch_size])
                    old[mi, ui] = self.logprobs(ids, attn, mask)
        for mi, mb in enumerate(minis):
            n_tok = float(batch["loss_mask"][mb].sum())
            for ui in range(0, len(mb), a.micro_batch_size):
                rows = mb[ui:ui + a.micro_batch_size]
                ids, attn, mask = micro(rows)
                lp = self.logprobs(ids, attn, mask)
                lp_old = old.get((mi, ui), lp.detach())
                A = adv[rows][:, None] * mask
                ratio = torch.exp(torch.where(mask > 0, lp - lp_old, torch.zeros_like(lp)))
                loss = torch.maximum(-A * ratio, -A * ratio.clamp(1 - a.clip_ratio_low,
                                                                  1 + a.clip_ratio_high))
                if a.dual_clip_c is not None:
                    loss = torch.where(A < 0, torch.minimum(loss, -A * a.dual_clip_c), loss)
                ((loss * mask).sum() / n_tok).backward()
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), a.grad_clip)
            self.optim.step()
            self.optim.zero_grad(set_to_none=True)


def world1(s: dict) -> dict:
    import torch

    from ragen2.learner.rank import LearnerRank
    from ragen2.controller import learner_settings
    from ragen2.train import load_config, resolve_model_path

    cfg = load_config(["cluster.learner_world_size=1", *OVERRIDES])
    path = resolve_model_path(cfg)
    rank = LearnerRank(cfg, path, 0, 1, threads=1, settings=learner_settings(cfg))
    rank.setup("127.0.0.1", 0)  # one rank: its store binds a port the OS assigns
    plain = PlainLoop(cfg, path)
    batch = make_batch(s["rows"], s["length"], plain.model.config.vocab_size)
    torch.set_num_threads(1)

    def timed(fn):  # (wall, cpu) seconds
        w, c = time.perf_counter(), time.process_time()
        fn()
        return time.perf_counter() - w, time.process_time() - c

    ours, base = [], []
    for r in range(s["repeats"] + 1):
        batch["policy_version"][:] = rank.state.version
        t_ours = timed(lambda: rank.update(batch, step=1))
        t_base = timed(lambda: plain.update(batch, step=1))
        if r == 0:  # the same maths: one update from the same weights gives the same weights
            theirs = plain.model.state_dict()
            diff = max(float(np.abs(v - theirs[k].numpy()).max())
                       for k, v in rank.policy_weights().items())
        else:
            ours.append(t_ours)
            base.append(t_base)
    torch.set_num_threads(os.cpu_count() or 1)  # for comparison with world size 2: all cores
    all_cores = []
    for r in range(s["repeats"] + 1):
        batch["policy_version"][:] = rank.state.version
        all_cores.append(common.timed(lambda: rank.update(batch, step=1))[1])
    rank.shutdown()
    med = lambda xs, i: common.median([x[i] for x in xs])  # noqa: E731
    return {"ragen2_update_s": med(ours, 0), "plain_update_s": med(base, 0),
            "ragen2_update_cpu_s": med(ours, 1), "plain_update_cpu_s": med(base, 1),
            "ragen2_update_all_cores_s": common.median(all_cores[1:]),
            "max_weight_diff": diff, "threads": 1,
            "samples": {"ragen2_update_s": ours, "plain_update_s": base}}


def _rank2(rank_id: int, rdv, s: dict, queue) -> None:
    from ragen2.learner.rank import LearnerRank
    from ragen2.controller import learner_settings
    from ragen2.train import load_config, resolve_model_path

    cfg = load_config(["cluster.learner_world_size=2", *OVERRIDES])
    rank = LearnerRank(cfg, resolve_model_path(cfg), rank_id, 2, threads=1,
                       settings=learner_settings(cfg))
    rdv.setup(rank)  # rank 0's store binds a port the OS assigns and sends it to rank 1
    batch = make_batch(s["rows"], s["length"], rank.model.config.vocab_size)
    times = []
    for _ in range(s["repeats"] + 1):
        batch["policy_version"][:] = rank.state.version
        t0, c0 = time.perf_counter(), time.process_time()
        rank.update(batch, step=1)
        times.append((time.perf_counter() - t0, time.process_time() - c0))
    rank.shutdown()
    queue.put((rank_id, times[1:]))


def world2(s: dict) -> dict:
    ctx = mp.get_context("spawn")
    from ragen2.cluster.rendezvous import SpawnRendezvous

    queue, rdv = ctx.Queue(), SpawnRendezvous(2, ctx)
    procs = [ctx.Process(target=_rank2, args=(r, rdv, s, queue)) for r in range(2)]
    for p in procs:
        p.start()
    got = dict(queue.get(timeout=900) for _ in procs)
    for p in procs:
        p.join()
    times = [max(a[0], b[0]) for a, b in zip(got[0], got[1])]  # ends when both ranks are done
    cpu = [max(a[1], b[1]) for a, b in zip(got[0], got[1])]
    return {"ragen2_update_s": common.median(times), "busiest_rank_cpu_s": common.median(cpu),
            "threads_per_rank": 1, "samples": times}


def main() -> None:
    args = common.parse_args(__doc__)
    s = QUICK if args.quick else FULL
    common.model_path()  # build the tiny model once, before the ranks race for it
    w1 = world1(s)
    print("world 1", {k: v for k, v in w1.items() if k != "samples"}, flush=True)
    w2 = world2(s)
    print("world 2", {k: v for k, v in w2.items() if k != "samples"}, flush=True)
    ratios = {"world1_ragen2_over_plain": w1["ragen2_update_cpu_s"] / w1["plain_update_cpu_s"],
              "world1_ragen2_over_plain_wall": w1["ragen2_update_s"] / w1["plain_update_s"],
              "world2_ragen2_over_world1_plain": w2["ragen2_update_s"] / w1["plain_update_s"]}
    common.write_result(
        "learner_overhead", args,
        {**s, "algorithm": "grpo (defaults)", "ppo_mini_batches": 2, "micro_batch_size": 16,
         "overrides": OVERRIDES}, {"world1": w1, "world2": w2}, ratios,
        {k: "lower" for k in ratios}, {"world1_ragen2_over_plain": "<= 1.10"})


if __name__ == "__main__":
    main()
