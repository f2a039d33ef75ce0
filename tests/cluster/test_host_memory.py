"""The CPU side of the memory estimate and the machine's choices (ragen2/cluster/host.py,
host_memory.py, auto.py): /proc parsers on hand-written files, SmolLM2's per-process budget worked
out by hand, the plan's choice of the learner's memory knobs, the refusal, and model.dtype=auto."""

from __future__ import annotations

import pytest

from ragen2.cluster import auto, host_memory as hm
from ragen2.cluster.host import HostMemory, cpu_bf16, cpu_flags, host_memory
from ragen2.cluster.shapes import KNOWN_SHAPES
from ragen2.train import load_config

GiB = 2**30
SMOL = KNOWN_SHAPES["HuggingFaceTB/SmolLM2-135M-Instruct"]
P = 134_515_008  # SmolLM2-135M by hand: 49152 x 576 embeddings (tied) + 30 x 3,540,096 + 576
BIG = HostMemory(total=1024 * GiB, available=1000 * GiB)

CPUINFO_AVX512 = """processor\t: 0
vendor_id\t: AuthenticAMD
flags\t\t: fpu sse2 avx2 avx512f avx512bw avx512_vnni avx512_bf16 fma
processor\t: 1
flags\t\t: fpu sse2 avx2 avx512f avx512bw avx512_vnni avx512_bf16 fma
"""
CPUINFO_AVX2 = "processor\t: 0\nflags\t\t: fpu sse2 avx avx2 fma\n"


def test_cpu_flags_and_bf16():
    assert {"avx2", "avx512_bf16"} <= cpu_flags(CPUINFO_AVX512)
    assert cpu_bf16(CPUINFO_AVX512) and not cpu_bf16(CPUINFO_AVX2)
    assert cpu_bf16("flags : avx2 amx_bf16 amx_tile\n")  # AMX counts too
    assert cpu_flags("no flags here\n") == set() and not cpu_bf16("")


def test_host_memory_reads_total_and_available():
    m = host_memory("MemTotal:       24576000 kB\nMemFree:  1000 kB\nMemAvailable:   20480000 kB\n")
    assert m == HostMemory(total=24_576_000 * 1024, available=20_480_000 * 1024)
    assert host_memory("MemTotal: 2048 kB\nMemFree: 1024 kB\n").available == 1024 * 1024
    assert host_memory("nothing\n") is None
    here = host_memory()  # this Linux machine
    assert here is not None and 0 < here.available <= here.total


def test_smollm2_shape_by_hand():
    assert SMOL.params() == P
    assert SMOL.activation_bytes_per_token_layer() == 2 * (6 * 576 + 2 * 3 * 64 + 4 * 1536) == 19_968
    assert SMOL.kv_bytes_per_token(4) == 2 * 30 * 3 * 64 * 4 == 46_080


def smol(*extra: str):
    return load_config(["model=smollm2", "model.dtype=float32", "engine=vllm",
                        "learner.micro_batch_tokens=2048", "learner.activation_checkpointing=false",
                        *extra])


def test_one_fp32_rank_by_hand():
    """W = 1, fp32, GRPO with the recipe's entropy bonus (k = 3), no KL, a 1024-token context."""
    cfg = smol("cluster.learner_world_size=1", "rollout.max_context_tokens=1024",
               "engine.max_new_tokens=64")
    b = hm.estimate_host_memory(cfg, BIG)
    n = 2048  # max(micro_batch_tokens 2048, context 1024)
    assert b.learner == {"process": hm.LEARNER_PROCESS, "policy weights+Adam": 12 * P}
    assert b.update == {
        "gradients": 4 * P,
        "gathered weights": 0.0,  # one fp32 rank computes on its own weights
        "activations": n * 2 * 19_968 * 30,  # fp32: twice the bf16 bytes, every layer kept
        "logits": n * 49_152 * (4 + 12 + 8)}  # fp32 logits, upcast, log-softmax, grad, entropy
    s = cfg.monitor.score_tokens or hm.SCORE_TOKENS_CPU  # one slice of scored continuations
    assert b.scoring == {"gathered weights": 0.0, "scoring logits": s * 49_152 * (4 + 8)}
    assert b.loading == 0.0
    update = 4 * P + n * 2 * 19_968 * 30 + n * 49_152 * 24  # 5.04 GiB > scoring's <= 2.25 GiB
    assert b.learner_peak == pytest.approx(hm.LEARNER_PROCESS + 12 * P + update)
    assert b.engine_peak == pytest.approx(hm.VLLM_ENGINE_PROCESS + 4 * P + 1 * GiB)
    assert sum(b.shared.values()) == pytest.approx(hm.DRIVER_PROCESS + hm.RAY_PROCESSES + 4 * P)
    assert b.need == pytest.approx(b.learner_peak + b.engine_peak + sum(b.shared.values()))
    assert b.room == pytest.approx(1000 * GiB - 0.05 * 1024 * GiB) and b.fits


def test_two_bf16_ranks_with_checkpointing_by_hand():
    """W = 2 in bf16 with checkpointing: half the states, a bf16 gathered copy, block inputs only."""
    cfg = smol("model.dtype=bfloat16", "learner.activation_checkpointing=true",
               "rollout.max_context_tokens=4096", "monitor.name=none")
    b = hm.estimate_host_memory(cfg, BIG)
    n = 4096  # the context: a row may be that long
    assert b.learner["policy weights+Adam"] == 12 * P / 2
    assert b.update == {
        "gradients": 4 * P / 2, "gathered weights": 2 * P,
        "activations": n * (2 * 576 * 30 + 19_968),  # each block's input + one block recomputed
        "logits": n * 49_152 * (2 + 12 + 8)}
    assert b.scoring == {} and b.loading == 4 * P  # rank 0's fp32 copy while it loads
    assert b.ranks == 2 and b.need == pytest.approx(
        2 * b.learner_peak + hm.VLLM_ENGINE_PROCESS + 2 * P + GiB + sum(b.shared.values()))


def test_hf_engine_counts_every_episode_at_full_context():
    cfg = smol("engine=hf", "rollout.env_groups=4", "rollout.group_size=4",
               "trainer.eval_episodes=32", "rollout.max_context_tokens=1024",
               "engine.hf_max_batch=64")  # more than the worker's 32 episodes: one batch
    b = hm.estimate_host_memory(cfg, BIG)
    assert b.engine == {"process": hm.HF_ENGINE_PROCESS, "weights": 4 * P,
                        "KV of 32 sequences": 32 * 1024 * 46_080, "sampler": 32 * 49_152 * 16}


def test_hf_engine_counts_one_batch_of_sequences():
    """engine.hf_max_batch below the worker's episodes: the engine holds one chunk at a time."""
    cfg = smol("engine=hf", "rollout.env_groups=4", "rollout.group_size=4",
               "trainer.eval_episodes=32", "rollout.max_context_tokens=1024",
               "engine.hf_max_batch=8")
    b = hm.estimate_host_memory(cfg, BIG)
    assert b.engine == {"process": hm.HF_ENGINE_PROCESS, "weights": 4 * P,
                        "KV of 8 sequences (engine.hf_max_batch; 32 episodes)": 8 * 1024 * 46_080,
                        "sampler": 8 * 49_152 * 16}
    two = smol("engine=hf", "rollout.env_groups=4", "rollout.group_size=4",
               "trainer.eval_episodes=32", "rollout.max_context_tokens=1024",
               "engine.hf_max_batch=8", "rollout.num_workers=2")  # 16 episodes each, 8 at once
    assert hm.estimate_host_memory(two, BIG).engine_peak == pytest.approx(b.engine_peak)


def free_cfg(*extra: str):
    """SmolLM2 with the memory knobs the overrides leave unset null again, as the recipe leaves
    them (load_config already planned them for this machine)."""
    from dataclasses import replace

    cfg = load_config(["model=smollm2", "model.dtype=float32", "engine=vllm",
                       "rollout.max_context_tokens=1024", "engine.max_new_tokens=64", *extra])
    given = " ".join(extra)
    lc = replace(cfg.learner,
                 micro_batch_tokens=cfg.learner.micro_batch_tokens if "micro_batch" in given else None,
                 activation_checkpointing=(cfg.learner.activation_checkpointing
                                           if "checkpointing" in given else None))
    return replace(cfg, learner=lc)


def needs(cfg, ckpt, mbt):
    return hm.estimate_host_memory(cfg, BIG, ckpt=ckpt, mbt=mbt).need


def room_for(need: float) -> HostMemory:
    """A host whose room (available less Ray's 5% of the total) is exactly ``need``."""
    total = 64 * GiB
    return HostMemory(total=total, available=int(need + 0.05 * total) + 1)


def test_the_plan_takes_the_fastest_candidate_that_fits():
    cfg = free_cfg()
    plan = lambda host: hm.plan_host_memory(cfg, host)  # noqa: E731
    key = ("learner.activation_checkpointing", "learner.micro_batch_tokens")
    as_pair = lambda p: tuple(p[k] for k in key)  # noqa: E731
    assert as_pair(plan(BIG)) == (False, 4096)
    assert as_pair(plan(room_for(needs(cfg, False, 2048)))) == (False, 2048)
    # just short of un-checkpointed 1024-token micro-batches: checkpointing, with the largest
    # micro-batch that then fits (the logits grow with it: 24 bytes a token and vocabulary entry)
    room = needs(cfg, False, 1024) - 1
    assert needs(cfg, True, 1024) < room < min(needs(cfg, True, 2048), needs(cfg, True, 4096))
    assert as_pair(plan(room_for(room))) == (True, 1024)
    # nothing fits: the smallest need, and the preflight refuses it naming the keys
    tiny_host = HostMemory(total=8 * GiB, available=4 * GiB)
    chosen = plan(tiny_host)
    assert as_pair(chosen) == (True, 1024)  # (True, 512) is the same N: rows are 1024 long
    problems, _ = hm.host_memory_problems(hm.apply_plan(cfg, chosen), tiny_host)
    assert len(problems) == 1 and "cluster.learner_world_size=1" in problems[0]
    assert "does not fit in this machine's memory" in problems[0]


def test_a_knob_set_in_the_config_is_kept():
    cfg = free_cfg("learner.micro_batch_tokens=1024")
    p = hm.plan_host_memory(cfg, BIG)
    assert p == {"learner.activation_checkpointing": False, "learner.micro_batch_tokens": 1024,
                 "engine.hf_max_batch": None}  # vLLM: the HF batch is not planned
    cfg = free_cfg("learner.activation_checkpointing=true")
    assert hm.plan_host_memory(cfg, BIG)["learner.activation_checkpointing"] is True
    assert load_config(["model=smollm2", "learner.micro_batch_tokens=512",
                        "learner.activation_checkpointing=true"]).learner.micro_batch_tokens == 512


def test_null_knobs_are_resolved_by_load_config():
    lc = load_config(["model=smollm2"]).learner
    assert lc.micro_batch_tokens in {mb for _, mb in hm.CANDIDATES}
    assert lc.activation_checkpointing in (True, False)
    cuda = load_config(["model=smollm2", "cluster=gpu_1", "model.dtype=bfloat16"]).learner
    assert (cuda.micro_batch_tokens, cuda.activation_checkpointing) == (4096, False)
    tiny = load_config([]).learner  # the tiny recipe sets both
    assert (tiny.micro_batch_tokens, tiny.activation_checkpointing) == (8192, False)


def test_memory_check_false_turns_the_refusal_into_a_warning():
    cfg = free_cfg("cluster.memory_check=false")
    problems, warnings = hm.host_memory_problems(cfg, HostMemory(8 * GiB, 2 * GiB))
    assert problems == [] and any("may not fit" in w for w in warnings)
    assert hm.estimate_host_memory(load_config(["cluster=gpu_1", "model=smollm2",
                                                "model.dtype=bfloat16"]), BIG) is None


@pytest.mark.parametrize("flags, device, want", [
    (CPUINFO_AVX512, "cpu", "bfloat16"), (CPUINFO_AVX2, "cpu", "float32"),
    (CPUINFO_AVX2, "cuda", "bfloat16")])
def test_auto_dtype(flags, device, want, monkeypatch):
    monkeypatch.delenv("RAGEN2_CPU_BF16", raising=False)
    dtype, why = auto.auto_dtype(device, flags)
    assert dtype == want and why


def test_auto_dtype_in_the_config_and_its_override(monkeypatch):
    import ragen2.cluster.host as host

    monkeypatch.delenv("RAGEN2_CPU_BF16", raising=False)
    monkeypatch.setattr(host, "cpu_bf16", lambda cpuinfo=None: True)
    assert load_config(["model=smollm2"]).model.dtype == "bfloat16"
    assert load_config(["model=smollm2", "model.dtype=float32"]).model.dtype == "float32"
    monkeypatch.setattr(host, "cpu_bf16", lambda cpuinfo=None: False)
    assert load_config(["model=smollm2"]).model.dtype == "float32"
    monkeypatch.setenv("RAGEN2_CPU_BF16", "1")
    assert load_config(["model=smollm2"]).model.dtype == "bfloat16"
    with pytest.raises(Exception, match="float32 or bfloat16 on cluster.device=cpu"):
        load_config(["model.dtype=float16"])



def planned_on_a_quiet_24gb_machine(cfg):
    """``cfg``'s learner knobs as a recipe leaves them (unset), planned for a 24 GiB machine with
    nothing else on it: (the planned config, its estimate)."""
    from dataclasses import replace

    cfg = replace(cfg, learner=replace(cfg.learner, micro_batch_tokens=None,
                                       activation_checkpointing=None))
    quiet = HostMemory(total=24 * GiB, available=21 * GiB)
    planned = hm.apply_plan(cfg, hm.plan_host_memory(cfg, quiet))
    return planned, hm.estimate_host_memory(planned, quiet)


def test_the_smollm2_math_preset_fits_a_quiet_24gb_machine():
    cfg = load_config(["+experiment=smollm2_math", "model.dtype=bfloat16"])
    assert cfg.cluster.learner_world_size == 1 and cfg.engine.name == "vllm"
    assert cfg.rollout.response_format == "plain" and cfg.env.kwargs["read"] == "last"
    planned, b = planned_on_a_quiet_24gb_machine(cfg)
    assert b.fits, b.describe()
    assert not planned.learner.activation_checkpointing  # no recomputation needed there


# ------------------------------------------------------------------ the HF engine's batch
PER_SEQ = 1024 * 46_080 + 49_152 * 16  # fp32 KV at a 1024-token context + the sampler's rows
#: SmolLM2 fp32, W = 1, no checkpointing, 2048-token micro-batches (test_one_fp32_rank_by_hand's
#: terms) with the HF engine, less its sequences: the four processes (learner 1.0, HF engine 1.0,
#: driver 1.2, Ray 1.0 GiB), 12 P + 4 P (update's gradients) + 4 P (engine weights) + 4 P (object
#: store) and one micro-batch's activations and logits
BASE = (4.2 * GiB + 24 * P + 2048 * 2 * 19_968 * 30 + 2048 * 49_152 * 24)


def hf_cfg(*extra: str):
    """SmolLM2 fp32 on the HF engine, 128 episodes on one worker, engine.hf_max_batch null again."""
    from dataclasses import replace

    cfg = smol("engine=hf", "cluster.learner_world_size=1", "rollout.max_context_tokens=1024",
               "engine.max_new_tokens=64", "rollout.num_workers=1", "rollout.env_groups=8",
               "rollout.group_size=4", "trainer.eval_episodes=128", *extra)
    return replace(cfg, engine=replace(cfg.engine, hf_max_batch=None))


def host_with_room(room: float) -> HostMemory:
    total = 16 * GiB  # Ray keeps 5% of it: 0.8 GiB
    return HostMemory(total=total, available=int(room + 0.05 * total))


def test_the_plan_shrinks_the_hf_batch_by_hand():
    """Room for the base and 50.5 sequences: 50 would fit, the grid's largest below is 48.
    BASE = 4.2 GiB + 24 x 134,515,008 + 2048 x 1,198,080 + 2048 x 1,179,648 = 12,607,662,797 B
    (11.74 GiB); a sequence 47,185,920 (KV) + 786,432 (sampler) = 47,972,352 B; the room
    12,607,662,797 + 50.5 x 47,972,352 = 15,030,266,573 B (14.00 GiB), on a 16 GiB host with
    15,889,260,032 B (14.80 GiB) available; the need at 48: 14,910,335,693 B (13.89 GiB)."""
    cfg = hf_cfg()
    assert PER_SEQ == 47_972_352 and BASE == pytest.approx(12_607_662_796.8)
    host = host_with_room(BASE + 50.5 * PER_SEQ)
    assert host.available == 15_889_260_032
    full = hm.estimate_host_memory(cfg, host)  # null: 256, i.e. all 128 episodes at once
    assert full.engine["KV of 128 sequences"] == 128 * 1024 * 46_080
    assert full.need == pytest.approx(BASE + 128 * PER_SEQ) and not full.fits
    plan = hm.plan_host_memory(cfg, host)
    assert plan == {"learner.activation_checkpointing": False, "learner.micro_batch_tokens": 2048,
                    "engine.hf_max_batch": 48}
    b = hm.estimate_host_memory(hm.apply_plan(cfg, plan), host)
    assert b.need == pytest.approx(BASE + 48 * PER_SEQ) == pytest.approx(14_910_335_693)
    assert b.fits and "KV of 48 sequences (engine.hf_max_batch; 128 episodes)" in b.engine
    assert hm.estimate_host_memory(cfg, host, batch=50).fits  # off the grid (hm.HF_BATCHES)
    assert not hm.estimate_host_memory(cfg, host, batch=51).fits


def test_the_plan_keeps_256_when_it_fits_and_on_cuda():
    cfg = hf_cfg()
    assert hm.plan_host_memory(cfg, BIG)["engine.hf_max_batch"] == hm.HF_MAX_BATCH == 256
    cuda = load_config(["model=smollm2", "cluster=gpu_1", "model.dtype=bfloat16", "engine=hf"])
    assert cuda.engine.hf_max_batch == 256
    vllm = load_config(["model=smollm2", "cluster=gpu_1", "model.dtype=bfloat16", "engine=vllm"])
    assert vllm.engine.hf_max_batch is None  # vLLM ignores it: not planned
    fixed = load_config(["model=smollm2", "engine=hf", "engine.hf_max_batch=7"])
    assert fixed.engine.hf_max_batch == 7


def test_the_default_tiny_job_on_the_hf_engine_keeps_256():
    """The tiny recipe on engine=hf fits a quiet 24 GiB machine with every episode at once: the
    plan keeps today's 256, so it samples exactly what it did before the key existed."""
    from dataclasses import replace

    cfg = load_config(["engine=hf"])
    cfg = replace(cfg, engine=replace(cfg.engine, hf_max_batch=None))
    quiet = HostMemory(total=24 * GiB, available=21 * GiB)
    assert hm.plan_host_memory(cfg, quiet)["engine.hf_max_batch"] == 256
    assert hm.hf_sequences(cfg) <= 256  # every generate call of a worker is one batch


def test_the_hf_batch_is_given_up_last():
    """Learner knobs null too: a slower learner setting that keeps every episode in one batch
    beats a faster one that must chunk; when none keeps them all, the largest batch wins."""
    from dataclasses import replace

    cfg = hf_cfg()
    cfg = replace(cfg, learner=replace(cfg.learner, micro_batch_tokens=None,
                                       activation_checkpointing=None))
    need = lambda ck, mb, batch: hm.estimate_host_memory(  # noqa: E731
        cfg, BIG, ckpt=ck, mbt=mb, batch=batch).need
    room = lambda n: n - 0.05 * 16 * GiB  # noqa: E731  (host_with_room's Ray reserve)
    # every episode fits with 1024-token micro-batches, not with 2048: (False, 1024) at 256
    host = host_with_room(need(False, 1024, 128) + PER_SEQ / 2)
    assert need(False, 2048, 128) > room(host.available)
    assert hm.plan_host_memory(cfg, host) == {
        "learner.activation_checkpointing": False, "learner.micro_batch_tokens": 1024,
        "engine.hf_max_batch": 256}
    # room for 48 sequences with checkpointing, 25 without: checkpointing and 48 (not 24)
    host = host_with_room(need(True, 1024, 48) + PER_SEQ / 2)
    assert need(False, 1024, 25) < room(host.available) < need(False, 1024, 26)
    assert hm.plan_host_memory(cfg, host) == {
        "learner.activation_checkpointing": True, "learner.micro_batch_tokens": 1024,
        "engine.hf_max_batch": 48}


def test_nothing_fits_keeps_256_and_the_refusal_names_the_batch():
    """Not even one sequence at a time fits: the batch stays 256 (memory_check=false launches what
    it did before the key existed) and the refusal names it among the fixes, with its KV."""
    cfg = hf_cfg()
    tiny_host = HostMemory(total=8 * GiB, available=4 * GiB)
    assert not hm.estimate_host_memory(cfg, tiny_host, batch=1).fits
    plan = hm.plan_host_memory(cfg, tiny_host)
    assert plan["engine.hf_max_batch"] == 256
    problems, _ = hm.host_memory_problems(hm.apply_plan(cfg, plan), tiny_host)
    assert len(problems) == 1  # 128 x 47,185,920 B of KV = 5.6 GiB
    assert "a smaller engine.hf_max_batch (now 256: 128 sequences at once, KV 5.6 GiB at 1024 " \
           "tokens each)" in problems[0]
    one = hm.apply_plan(cfg, {**plan, "engine.hf_max_batch": 1})  # no KV lever left to name
    problems, _ = hm.host_memory_problems(one, tiny_host)
    assert len(problems) == 1 and "engine.hf_max_batch" not in problems[0].split("fix:")[1]


def test_smollm2_on_the_hf_engine_fits_a_quiet_24gb_machine():
    """docs/how-to/memory.md's figures: model=smollm2 engine=hf, nothing else set, on this 23.5 GiB
    machine with 21 GiB available: the batch shrinks from 256 (28.5 GiB) to 24 (19.3 GiB; 30
    would fit, off the grid)."""
    quiet = HostMemory(total=int(23.5 * GiB), available=21 * GiB)
    with hm.planning_host(quiet):
        cfg = load_config(["model=smollm2", "engine=hf", "model.dtype=bfloat16"])
    assert cfg.engine.hf_max_batch == 24 and cfg.learner.activation_checkpointing
    b = hm.estimate_host_memory(cfg, quiet)
    assert b.fits and b.need / GiB == pytest.approx(19.3, abs=0.05)
    assert hm.estimate_host_memory(cfg, quiet, batch=30).fits
    full = hm.estimate_host_memory(cfg, quiet, batch=256)
    assert full.need / GiB == pytest.approx(28.5, abs=0.05)
    assert hm.estimate_host_memory(cfg, quiet, batch=31).need > b.room
    assert hm.HF_BATCHES[-1] == 1 and list(hm.HF_BATCHES) == sorted(hm.HF_BATCHES, reverse=True)
