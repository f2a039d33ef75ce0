"""The learner's numbers on fixed batches, to compare two checkouts bit for bit (issue 29).

For five configurations (GRPO; entropy + KL with the scaled SNR gate at engine.temperature 0.8;
Dr.GRPO; PPO with GAE and KL; token micro-batches with the threshold gate) it runs grad_snr and two
updates of one CPU rank (tiny model, non-uniform sample weights, temperature scales, loss scale)
and prints every metric and a digest of the weights. Works with the LearnerRank before and after
the split (the settings argument is detected)::

    PYTHONPATH=<checkout A> python benchmarks/learner_identity.py <tiny model dir> > a.json
    PYTHONPATH=<checkout B> python benchmarks/learner_identity.py <tiny model dir> > b.json
    cmp a.json b.json

Measured for the objective/learner split against 3e56513: identical files.
"""
import hashlib, inspect, json, sys
import numpy as np, torch
from ragen2.learner.rank import LearnerRank
from ragen2.train import load_config

PATH = sys.argv[1]

def batch(n=8, L=24, vocab=50, shared=False):
    rng = np.random.default_rng(3)
    ids = rng.integers(3, vocab, (n, L)); lens = rng.integers(12, L + 1, n)
    if shared:  # each group's rows begin with the same 8-token prompt (the shared-prefix forward)
        ids[:4, :8], ids[4:, :8] = ids[0, :8], ids[4, :8]
    attn = (np.arange(L)[None] < lens[:, None]).astype(np.int64)
    mask = (attn * (rng.random((n, L)) < 0.6)).astype(np.int64); mask[:, :8 if shared else 4] = 0
    tok_r = np.zeros((n, L), np.float32)
    for i in range(n):
        tok_r[i, np.flatnonzero(mask[i])[-1]] = rng.random()
    return {"input_ids": ids * attn, "attention_mask": attn, "loss_mask": mask,
            "logprobs": (-rng.random((n, L))).astype(np.float32), "token_rewards": tok_r,
            "rewards": np.array([1, 0, 0.5, 1, 1, 1, 0, 0.25], np.float32),
            "group_ids": np.array([0, 0, 0, 0, 1, 1, 1, 1]), "policy_version": np.zeros(n, np.int64),
            "temperature_scales": np.array([1, 1, 1.2, 1, 1, 1, 1, 1.2], np.float32),
            "sample_weights": np.array([1, 1.5, 1, 0.5, 1, 1, 2, 1], np.float32),
            "loss_scale": np.array(0.7)}

CASES = {
 "default": [],
 "gate_ent_kl": ["algorithm.entropy_coef=0.01", "algorithm.kl_coef=0.05", "algorithm.regulariser_gate=scaled", "engine.temperature=0.8"],
 "drgrpo": ["algorithm=drgrpo", "engine.max_new_tokens=16", "rollout.max_turns=2"],
 "ppo_gae": ["algorithm=ppo", "algorithm.kl_coef=0.02"],
 "prefix_tokens": ["learner.micro_batch_tokens=64", "algorithm.entropy_coef=0.02", "algorithm.regulariser_gate=threshold"],
 # added for issue 47 item 4: a stale second batch (importance weights), prompts shared in a group
 "stale_k1": ["trainer.max_staleness=1", "engine.sleep_mode=false", "algorithm.micro_batch_size=2", "algorithm.ppo_mini_batches=2"],
 "shared_prompts": ["algorithm.micro_batch_size=4", "algorithm.entropy_coef=0.01", "algorithm.kl_coef=0.05"],
}
new = "settings" in inspect.signature(LearnerRank.__init__).parameters
out = {}
for name, ov in CASES.items():
    cfg = load_config(["cluster.learner_world_size=1", "algorithm.lr=1e-3", *ov])
    kw = {}
    if new:
        from ragen2.controller import learner_settings
        kw["settings"] = learner_settings(cfg)
    torch.manual_seed(0)
    r = LearnerRank(cfg, PATH, 0, 1, threads=1, **kw)
    r.setup("127.0.0.1", 0)  # one rank: its store binds a port the OS assigns
    try:
        shared = name == "shared_prompts"
        b = batch(shared=shared)
        g = r.grad_snr(b, np.array([0, 0, 0, 0, 1, 1, 1, 1]))
        m = r.update(b, step=1)
        version = 0 if name == "stale_k1" else 1  # stale_k1: a batch one version old
        b2 = {**batch(shared=shared), "policy_version": np.full(8, version, np.int64)}
        m2 = r.update(b2, step=2)
        w = r.policy_weights()
        h = hashlib.sha256(b"".join(w[k].tobytes() for k in sorted(w))).hexdigest()[:16]
        out[name] = {"grad_snr": g, "m1": m, "m2": m2, "weights": h}
    finally:
        r.shutdown()
print(json.dumps(out, sort_keys=True, indent=1))
