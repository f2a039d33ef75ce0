"""benchmarks/step_account.py's pure parts (issue 44, item 1): the parameter and FLOP counts, the
floors, the phase aggregation of a hand-written metrics.jsonl, the synthetic update batch, the
profile's attribution, and the results-page blocks rendered from a hand-written document.
Nothing here trains or times anything."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import step_account as sa  # noqa: E402  (benchmarks/step_account.py)
from results_pages import BLOCKS  # noqa: E402

#: a small shape whose counts are worked out by hand below
SMALL = sa.ModelShape(hidden=8, layers=2, heads=2, kv_heads=1, head_dim=4, intermediate=16,
                      vocab=10, tied=True, qkv_bias=True)


def qwen2_config(**kw):
    from transformers import Qwen2Config

    base = dict(vocab_size=1000, hidden_size=64, intermediate_size=192, num_hidden_layers=3,
                num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True)
    return Qwen2Config(**{**base, **kw})


# ------------------------------------------------------------------------- parameter counts
def test_small_shape_by_hand():
    # per layer: q 8x8 + k 8x4 + v 8x4 + o 8x8 + MLP 3 x 8x16 = 576 matmul weights
    assert SMALL.body_matmul_params == 2 * 576
    assert SMALL.head_params == 80
    # + q/k/v biases 16 + two norms 16 per layer, the embedding once (tied), the final norm
    assert SMALL.params == 80 + 2 * (576 + 16 + 16) + 8 == 1304
    assert SMALL.kv_bytes_per_token(4) == 2 * 2 * 1 * 4 * 4


def test_the_default_tiny_model_has_1_1m_parameters():
    tiny = sa.ModelShape.from_hf({"hidden_size": 128, "num_hidden_layers": 4,
                                  "num_attention_heads": 4, "num_key_value_heads": 2,
                                  "intermediate_size": 512, "vocab_size": 1024,
                                  "tie_word_embeddings": True, "model_type": "qwen2"})
    assert tiny.params == 1_116_288


@pytest.mark.parametrize("tied", [True, False])
def test_params_match_a_qwen2_built_on_the_meta_device(tied):
    import torch
    from transformers import Qwen2ForCausalLM

    config = qwen2_config(tie_word_embeddings=tied)
    with torch.device("meta"):
        model = Qwen2ForCausalLM(config)
    shape = sa.ModelShape.from_hf(config.to_dict())
    assert shape.tied is tied and shape.qkv_bias
    assert shape.params == sum(p.numel() for p in model.parameters())
    linear = sum(m.weight.numel() for n, m in model.model.layers.named_modules()
                 if isinstance(m, torch.nn.Linear))
    assert shape.body_matmul_params == linear


def test_forward_flops_match_torch_flop_counter():
    """Eager attention computes the full L x L scores: causal=False counts what it runs."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode
    from transformers import Qwen2ForCausalLM

    config = qwen2_config(vocab_size=50, hidden_size=32, intermediate_size=64,
                          num_hidden_layers=2)
    config._attn_implementation = "eager"
    model = Qwen2ForCausalLM(config).eval()
    ids = torch.randint(0, 50, (2, 7))
    with torch.no_grad(), FlopCounterMode(display=False) as fc:
        model(input_ids=ids, use_cache=False)
    shape = sa.ModelShape.from_hf(config.to_dict())
    assert fc.get_total_flops() == sa.forward_flops(shape, 14, 14, 2 * 7 ** 2, causal=False)


# ------------------------------------------------------------------------------ FLOP counting
def test_forward_flops_by_hand():
    # 4 rows of 25 tokens, logits at 40: 2x1152x100 + 2x80x40 + 4x2x2x4x(4x25^2 / 2)
    assert sa.forward_flops(SMALL, 100, 40, 4 * 25 ** 2) == 230_400 + 6_400 + 80_000


GRPO = {"ppo_mini_batches": 2, "ppo_epochs": 1, "kl_coef": 0.0, "critic": False,
        "micro_batch_size": 16, "world_size": 1}


def test_update_flops_count_what_ragen2_runs():
    tok = sa.Tokens(rows=4, seq_mean=25, trained_mean=10)
    fwd = 316_800
    w = sa.update_work(SMALL, tok, GRPO)
    # the second mini-batch's old logprobs (half the rows), one forward + backward, AdamW x 2
    assert w["old_logprob_flops"] == fwd / 2
    assert w["train_flops"] == 3 * fwd
    assert w["ref_flops"] == 0 and w["critic_flops"] == 0
    assert w["flops"] == fwd / 2 + 3 * fwd + 12 * 1304 * 2
    kl = sa.update_work(SMALL, tok, {**GRPO, "kl_coef": 0.1})
    assert kl["flops"] - w["flops"] == fwd  # the reference forward
    two = sa.update_work(SMALL, tok, {**GRPO, "ppo_epochs": 2})
    assert two["train_flops"] == 6 * fwd and two["optimizer_flops"] == 12 * 1304 * 4
    lora = sa.update_work(SMALL, tok, {**GRPO, "lora_rank": 8, "lora_dropout": True})
    assert lora["old_logprob_flops"] == fwd and lora["train_flops"] == 2 * fwd
    ppo = sa.update_work(SMALL, tok, {**GRPO, "critic": True})
    critic_fwd = 2 * 1152 * 100 + 4 * 2 * 2 * 4 * 1250 + 2 * 8 * 100
    assert ppo["critic_flops"] == 4 * critic_fwd


def test_update_bytes_by_hand():
    w = sa.update_work(SMALL, sa.Tokens(8, 25, 10), {**GRPO, "world_size": 2})
    assert w["optimizer_bytes"] == 7 * 4 * 1304 * 2
    assert w["logits_bytes"] == 80 * 10 * 4 * (2 * 0.5 + 4)
    # 2 rows per rank per mini-batch: one micro-batch each; gathers: 0.5 no-grad + 3 per train
    assert w["collective_bytes"] == 2 * 4 * 1304 * 2 * 3.5
    assert w["bytes"] == 73_024 + 16_000 + 73_024


def test_generation_work_by_hand():
    w = sa.generation_work(SMALL, sa.Tokens(4, 25, 10), decode_steps=10, dtype_bytes=4)
    assert w["flops"] == 316_800
    assert w["weight_bytes"] == 1304 * 4 * 10
    assert w["kv_bytes"] == 40 * 12.5 * 64


def test_floor_arithmetic():
    f = sa.floor_seconds(1e12, 1e9, 1e11, 1e10)
    assert (f["compute_s"], f["memory_s"], f["floor_s"], f["bound"]) == (10.0, 0.1, 10.0, "compute")
    f = sa.floor_seconds(1e9, 1e12, 1e11, 1e10)
    assert (f["floor_s"], f["bound"]) == (100.0, "memory")
    assert sa.floor_seconds(None, None, 1e11, 1e10)["floor_s"] is None
    assert sa.floor_seconds(1e9, None, 1e11, None)["bound"] == "compute"


# ------------------------------------------------------------------------- phase aggregation
def _row(step, **timing):
    tokens = {"rollout/sequence_tokens_mean": 25.0, "rollout/num_turns_mean": 2.0,
              "rollout/response_tokens_mean": 5.0, "filter/kept_ratio": 0.5}
    return {"step": step, **({} if step == 0 else tokens),
            **{f"timing/{k}": v for k, v in timing.items()}}


ROWS = [
    {**_row(0, warm_start_s=200.0, sync_s=3.0, probe_s=2.0, eval_s=6.0, panel_s=4.0,
            panel_turns_s=5.0), "eval/sequence_tokens_mean": 30.0, "eval/num_turns_mean": 3.0,
     "eval/response_tokens_mean": 4.0, "warm_start/cached": 0.0},
    _row(1, step_s=30.0, rollout_s=10.0, generate_s=9.0, env_s=0.1, update_s=15.0, sync_s=1.0,
         probe_s=0.5, monitor_s=2.0),  # step 1: left out of the medians
    _row(2, step_s=10.0, rollout_s=4.0, generate_s=3.0, env_s=0.2, update_s=5.0, sync_s=0.1,
         probe_s=0.05),
    _row(3, step_s=12.0, rollout_s=4.5, generate_s=3.5, env_s=0.3, update_s=6.0, sync_s=0.1,
         probe_s=0.05, monitor_s=1.0, new_thing_s=0.5),
    {**_row(4, step_s=11.0, rollout_s=4.2, generate_s=3.2, env_s=0.2, update_s=5.5, sync_s=0.2,
            probe_s=0.05, eval_s=7.0, panel_s=3.0), "eval/sequence_tokens_mean": 30.0,
     "eval/num_turns_mean": 3.0, "eval/response_tokens_mean": 4.0},
]


@pytest.fixture
def metrics_file(tmp_path):
    path = tmp_path / "metrics.jsonl"
    lines = [json.dumps(r) for r in ROWS]
    lines.insert(3, '{"step": 2, "timing/ste')  # a row torn by a kill
    path.write_text("\n".join(lines) + "\n")
    return path


def test_phase_medians_over_steps_2_to_n(metrics_file):
    rows = sa.read_metrics(metrics_file)
    agg = sa.aggregate(rows)
    assert agg["steps_used"] == [2, 3, 4]
    p = agg["phases"]
    assert p["timing/step_s"]["median_s"] == 11.0  # step 1's 30 s left out
    assert p["timing/update_s"]["median_s"] == 5.5
    assert p["timing/update_s"]["share_of_step"] == pytest.approx(16.5 / 33.0)
    assert (p["timing/monitor_s"]["median_s"], p["timing/monitor_s"]["n"]) == (1.0, 1)
    # untimed: step - rollout - monitor - update - sync - probe = 0.85, 0.35, 1.05
    assert p["untimed/step"]["median_s"] == pytest.approx(0.85)
    assert p["untimed/step"]["total_s"] == pytest.approx(2.25)
    assert p["untimed/rollout"]["median_s"] == pytest.approx(0.8)  # 4 - 3 - 0.2
    # the loop's phases outside the step: step 4 only (step 0's evaluation is before RL)
    assert (p["timing/eval_s"]["median_s"], p["timing/eval_s"]["steps"]) == (7.0, [4])
    assert "share_of_step" not in p["timing/eval_s"]
    assert "timing/warm_start_s" not in p
    assert agg["timing_keys_unknown"] == ["timing/new_thing_s"]
    shares = sum(p[k]["share_of_step"] for k in ("timing/rollout_s", "timing/monitor_s",
                                                  "timing/update_s", "timing/sync_s",
                                                  "timing/probe_s", "untimed/step"))
    assert shares == pytest.approx(1.0)


def test_the_whole_job_in_parts(metrics_file):
    job = sa.job_account(sa.read_metrics(metrics_file), {"wall_s": 300.0}, 320.0)
    parts = job["parts"]
    assert parts["warm start"] == 200.0
    assert parts["first weight sync and probe"] == 5.0
    assert parts["probe panels before RL"] == 9.0
    assert parts["RL steps"] == 63.0  # steps 1-4
    assert parts["evaluations during RL"] == 7.0
    assert parts["untimed inside the run"] == pytest.approx(300 - 293)
    assert parts["outside the run"] == 20.0
    assert sum(job["shares"].values()) == pytest.approx(1.0)


SETTINGS = {"env_groups": 4, "group_size": 4, "max_turns": 8, "max_new_tokens": 40,
            "ppo_epochs": 1, "ppo_mini_batches": 2, "micro_batch_size": 16, "kl_coef": 0.0,
            "critic": False, "lora_rank": 0, "lora_dropout": False, "world_size": 2,
            "num_workers": 1, "cores": 2, "learner_threads": 1, "worker_threads": 2,
            "dtype": "float32", "eval_episodes": 8,
            "warm_start": {"enabled": True, "episodes": 16, "epochs": 3}, "probe_tokens": 0}
CEILINGS = {"matmul": {"float32": {"1": {"gflops": 100.0}, "2": {"gflops": 150.0}}},
            "bandwidth": {"1": {"traffic_bytes_per_s": 1e10}, "2": {"traffic_bytes_per_s": 2e10}}}


def test_floors_beside_the_phases(metrics_file):
    acc = sa.build_account(sa.read_metrics(metrics_file), SETTINGS, SMALL, CEILINGS,
                           {"wall_s": 300.0}, 320.0)
    p = {x["key"]: x for x in acc["phases"]}
    # two learner ranks of one thread: 2 x 100 GFLOP/s; the update's 8 kept rows (16 x 0.5)
    assert acc["peaks_used"]["learner_flops_per_s"] == 2e11
    upd = p["timing/update_s"]
    assert upd["flops"] == 2_248_896  # 633,600 a forward: 0.5 + 3 of them, AdamW 31,296
    assert upd["compute_s"] == pytest.approx(2_248_896 / 2e11)
    assert (upd["bound"], upd["floor_s"]) == ("memory", pytest.approx(162_048 / 1e10))
    assert upd["over_floor"] == pytest.approx(5.5 / (162_048 / 1e10))
    # generation: all 16 episodes on the worker (one process of two threads)
    gen = p["timing/rollout_s"]
    assert gen["compute_s"] == pytest.approx(1_267_200 / 1.5e11)
    assert gen["memory_s"] == pytest.approx((52_160 + 128_000) / 2e10)
    assert any("overhead-bound" in n for n in gen["notes"])
    assert p["untimed/step"]["floor_s"] is None
    # evaluation: 8 episodes of the eval/* figures (30 tokens, 3 turns x 4)
    ev = sa.forward_flops(SMALL, 8 * 30, 8 * 12, 8 * 30 ** 2)
    assert p["timing/eval_s"]["compute_s"] == pytest.approx(ev / 1.5e11)
    step = p["timing/step_s"]
    in_step = [p[k]["floor_s"] * p[k]["n"] for k in ("timing/rollout_s", "timing/update_s",
                                                     "timing/sync_s") if p[k]["floor_s"]]
    assert step["floor_s"] == pytest.approx(sum(in_step) / 3)
    ws = acc["job"]["warm_start_floor"]
    assert ws["flops"] == 3 * 3 * sa.forward_flops(SMALL, 16 * 30, 16 * 12, 16 * 30 ** 2)


# ----------------------------------------------------------------------- the update's profile
def test_synthetic_batch_is_shaped_like_a_multi_turn_batch():
    b = sa.synthetic_batch(rows=8, group_size=4, prompt_tokens=20, turns_mean=3, reply_tokens=5,
                           obs_tokens=7, max_turns=6, vocab=100)
    lengths = b["attention_mask"].sum(1)
    trained = b["loss_mask"].sum(1)
    assert (trained % 5 == 0).all() and (trained >= 5).all()
    turns = trained // 5
    assert (lengths == 20 + 5 * turns + 7 * (turns - 1)).all()
    assert (b["input_ids"][:4, :20] == b["input_ids"][0, :20]).all()  # a group's prompt
    assert not (b["input_ids"][4, :20] == b["input_ids"][0, :20]).all()
    assert (b["loss_mask"][:, :20] == 0).all()
    assert list(b["group_ids"]) == [0, 0, 0, 0, 1, 1, 1, 1]
    assert set(b["rewards"][:4]) == {0.0, 1.0}


def test_batch_spec_from_a_run():
    spec = sa.batch_spec(sa.Tokens(62, 800, 210), turns=6, group_size=4, max_turns=8,
                         prompt_tokens=170)
    assert spec["rows"] == 64 and spec["reply_tokens"] == 35
    assert spec["obs_tokens"] == round((800 - 210 - 170) / 5)
    guess = sa.batch_spec(sa.Tokens(64, 800, 210), 6, 4, 8, None)
    assert guess["prompt_tokens"] == guess["obs_tokens"] == round((800 - 210) / 6)


def test_classify_profile_events():
    assert sa.classify("aten::mm", ["account::forward"]) == "aten matmul"
    in_gather = ["FSDP::all_gather_copy_out (model.layers.0)"]
    assert sa.classify("aten::copy_", in_gather) == "collectives"
    assert sa.classify("c10d::allreduce_", []) == "collectives"
    assert sa.classify("aten::mul_", ["Optimizer.step#AdamW.step"]) == "optimizer"
    assert sa.classify("aten::add", []) == "aten other"
    assert sa.classify("autograd::engine::evaluate_function: MmBackward0", []) == "autograd engine"
    assert sa.classify("FSDP::pre_forward (model)", []) == "python / framework"


def test_attribute_a_real_profile():
    import torch

    x = torch.randn(64, 64)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        with torch.profiler.record_function("account::update"):
            for _ in range(3):
                x = torch.mm(x, x).tanh()
            with torch.profiler.record_function("FSDP::all_gather (model.layers.0)"):
                torch.cat([x, x])  # an op inside FSDP's range: the collective's own copy
    out = sa.attribute(prof.events(), wall_s=10.0)
    cats = out["categories_s"]
    assert cats["aten matmul"] > 0 and cats["aten other"] > 0
    assert cats["collectives"] > 0  # found through the event's parents
    assert sum(cats.values()) == pytest.approx(10.0)  # the rest counted as Python
    assert {o["name"] for o in out["top_ops"]} >= {"aten::mm", "aten::tanh"}
    assert next(o for o in out["top_ops"] if o["name"] == "aten::mm")["calls"] == 3


# ------------------------------------------------------------------------- the page blocks
DOC = {
    "benchmark": "step_account", "quick": False,
    "machine": {"cpu": "Test CPU", "cpus": 2, "load_avg_1m": 0.1},
    "settings": {"overrides": ["trainer.total_steps=10"],
                 "job_settings": {"world_size": 2, "learner_threads": 1, "worker_threads": 2}},
    "results": {
        "steps_used": [2, 3, 4, 5],
        "peaks_used": {"dtype": "float32", "learner_flops_per_s": 176e9,
                       "worker_flops_per_s": 170e9, "learner_traffic_bytes_per_s": 12.34e9},
        "phases": [
            {"key": "timing/step_s", "name": "step", "where": "step", "n": 4, "median_s": 17.3,
             "share_of_step": 1.0, "floor_s": 1.52, "bound": "phases", "over_floor": 11.38},
            {"key": "timing/update_s", "name": "update", "where": "step", "n": 4,
             "median_s": 11.9, "share_of_step": 0.68, "floor_s": 0.745, "bound": "compute",
             "over_floor": 15.97},
            {"key": "untimed/step", "name": "scoring/filtering (untimed)", "where": "step",
             "n": 4, "median_s": 0.4, "share_of_step": 0.02, "floor_s": None, "bound": None,
             "over_floor": None},
            {"key": "timing/eval_s", "name": "evaluation", "where": "loop", "n": 1,
             "median_s": 8.0, "floor_s": 0.0004, "bound": "memory", "over_floor": 20000.0},
        ],
        "not_timed": {"checkpoint (untimed)": "..."},
        "job": {"parts": {"warm start": 210.0, "RL steps": 693.0, "outside the run": 30.5},
                "shares": {"warm start": 0.2, "RL steps": 0.7, "outside the run": 0.1},
                "process_wall_s": 1098.0, "run_wall_s": 1067.5, "steps": 40,
                "warm_start_floor": {"floor_s": 2.5, "over_floor": 84.0, "note": "a note"}},
        "update_profile": None,
    },
}


@pytest.fixture
def doc_path(tmp_path):
    def write(doc):
        path = tmp_path / f"doc{len(list(tmp_path.iterdir()))}.json"
        path.write_text(json.dumps(doc))
        return str(path)
    return write


def test_phase_block_renders_the_document(doc_path):
    md = BLOCKS["step-account-phases"](doc_path(DOC))
    assert "Test CPU (2 cores)" in md
    assert "176 GFLOP/s over the 2 learner rank(s) at 1 thread(s) each" in md
    assert "12.3 GB/s" in md
    assert "steps 2-5 (4 steps) of the default job with `trainer.total_steps=10`." in md
    assert "170 GFLOP/s for the rollout worker(s) at 2 thread(s)" in md
    assert "| update | 4 | 11.90 s | 68% | 0.745 s | compute | 16x |" in md
    assert "| step | 4 | 17.30 s | 100% | 1.52 s | phases | 11x |" in md
    assert "| scoring/filtering (untimed) | 4 | 0.400 s | 2% | — | — | — |" in md
    assert "| evaluation (outside the step) | 1 | 8.00 s | | 4.0e-04 s | memory | 20,000x |" in md
    assert "`checkpoint (untimed)`" in md


def test_job_block_renders_the_document(doc_path):
    """No run: the block names the trainer's process it read the wall time of."""
    md = BLOCKS["step-account-job"](doc_path(DOC))
    assert md.startswith("The whole job: 1,098.00 s (the `ragen2-train` process), 40 RL steps.")
    assert "The warm start's floor: 2.50 s; it took 84x that (a note)." in md
    assert "| RL steps | 693.00 s | 70% |" in md


def test_update_block_with_and_without_a_profile(doc_path):
    assert "not profiled" in BLOCKS["step-account-update"](doc_path(DOC))
    prof = {"world_size": 2, "threads_per_rank": 1, "repeats": 3, "update_s": 10.0,
            "job_update_median_s": 11.9, "batch_note": "a batch note",
            "batch": {"rows": 64, "group_size": 4, "prompt_tokens": 170, "turns_mean": 6.2,
                      "reply_tokens": 35},
            "phases_s": {"forward": 2.5, "backward": 5.0, "optimizer": 0.5, "other": 2.0},
            "profiled": {"wall_s": 12.0, "categories_s": {"aten matmul": 3.0,
                                                          "collectives": 6.0,
                                                          "python / framework": 3.0}}}
    doc = json.loads(json.dumps(DOC))
    doc["results"]["update_profile"] = prof
    md = BLOCKS["step-account-update"](doc_path(doc))
    assert "2 gloo rank(s) at 1 thread(s) each" in md and "64 rows in groups of 4" in md
    assert "10.00 s (median of 3); the job's update: 11.90 s." in md
    assert "| backward | 5.00 s | 50% |" in md
    assert "| collectives | 6.00 s | 50% |" in md


def test_update_block_after_a_failed_profile(doc_path):
    doc = json.loads(json.dumps(DOC))
    doc["results"]["update_profile"] = {"error": "rank 1 hung", "batch": {}}
    assert "failed" in BLOCKS["step-account-update"](doc_path(doc))


# ---------------------------------------------------------------------- settings and plumbing
def test_job_settings_of_the_default_job():
    import os

    from ragen2.train import load_config

    cfg = load_config([])
    s = sa.job_settings(cfg)
    assert (s["world_size"], s["num_workers"]) == (cfg.cluster.learner_world_size,
                                                   cfg.rollout.num_workers)
    assert s["learner_threads"] == max(1, (os.cpu_count() or 1) // s["world_size"])
    assert (s["ppo_mini_batches"], s["ppo_epochs"]) == (cfg.algorithm.ppo_mini_batches,
                                                        cfg.algorithm.ppo_epochs)
    assert s["critic"] is False and s["kl_coef"] == cfg.algorithm.kl_coef
    assert (s["env_groups"], s["group_size"]) == (cfg.rollout.env_groups, cfg.rollout.group_size)
    assert s["warm_start"]["epochs"] == cfg.trainer.warm_start.epochs
    ppo = sa.job_settings(load_config(["algorithm=ppo"]))
    assert ppo["critic"] is True


def test_run_overrides_come_from_the_run(tmp_path):
    (tmp_path / ".hydra").mkdir()
    (tmp_path / ".hydra" / "overrides.yaml").write_text(
        "- trainer.total_steps=10\n- hydra.job.chdir=false\n- seed=3\n")
    assert sa.run_overrides(tmp_path, ["x=1"]) == ["trainer.total_steps=10", "seed=3"]
    assert sa.run_overrides(tmp_path / "none", ["x=1"]) == ["x=1"]


def test_the_microbenchmarks_return_rates_and_leave_the_threads_as_they_were():
    import torch

    before = torch.get_num_threads()
    assert sa.matmul_gflops(16, threads=1, repeats=1, min_flop=1) > 0
    bw = sa.copy_bandwidth(mbytes=1, threads=1, repeats=1)
    assert bw["traffic_bytes_per_s"] == 2 * bw["copy_bytes_per_s"] > 0
    assert torch.get_num_threads() == before


def test_the_script_helps_without_running_anything():
    """No run: ``--help`` exits before the microbenchmarks, the job or any import of torch."""
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "step_account.py"), "--help"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "--profile-update" in out.stdout
