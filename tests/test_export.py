"""``ragen2 export``: a checkpoint becomes a Hugging Face model folder whose logprobs are the
learner's. Round trips: the smoke run's last checkpoint (full fine-tuning, written by two FSDP2
ranks), and a LoRA checkpoint written by the learner itself with non-zero adapters (exported
merged). The learner side is a one-rank :class:`LearnerRank` that loads the same checkpoint."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from ragen2.export import ExportError, export_checkpoint, find_checkpoint, main
from ragen2.learner.rank import LearnerRank
from ragen2.controller import learner_settings
from ragen2.train import load_config
from tests.runs import small

#: fp32 on the CPU: the exported model and the learner run the same weights through the same
#: transformers code (measured gaps ~1e-6 and below)
TOLERANCE = 1e-5


def _ids(tokenizer) -> list[int]:
    text = ("<think>I am at row 1, column 1. The goal is at row 4, column 4.</think>"
            "<answer>Down</answer> The frozen lake map: S F F H / F H F F / F F F H / H F F G")
    return tokenizer(text)["input_ids"]


def _hf_logprobs(folder: Path, ids: list[int]) -> torch.Tensor:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    t = torch.tensor([ids])
    with torch.no_grad():
        logits = model(input_ids=t).logits[0, :-1].float()
    return torch.log_softmax(logits, -1).gather(-1, t[0, 1:, None])[:, 0]


def _learner(cfg, model_path: str) -> LearnerRank:
    r = LearnerRank(cfg, model_path, 0, 1, threads=1, settings=learner_settings(cfg))
    r.setup("127.0.0.1", 0)  # one rank: its store binds a port the OS assigns
    return r


def test_a_full_checkpoint_exports_to_the_learners_logprobs(four_steps, tiny_model_path,
                                                            tiny_tokenizer, tmp_path):
    ckpt = find_checkpoint(four_steps)
    assert ckpt.name == "step_000004"
    cfg = load_config(small(tiny_model_path, "trainer.total_steps=4", "trainer.save_every=2",
                            "cluster.learner_world_size=1"))
    out = export_checkpoint(ckpt, tmp_path / "hf", cfg, tiny_model_path)
    ids = _ids(tiny_tokenizer)
    r = _learner(cfg, tiny_model_path)
    try:
        r.load(str(ckpt))
        learner = torch.tensor(r.logprobs(ids))
    finally:
        r.shutdown()
    exported, base = _hf_logprobs(out, ids), _hf_logprobs(Path(tiny_model_path), ids)
    gap = (exported - learner).abs().max().item()
    assert gap < TOLERANCE, gap
    assert (base - learner).abs().max().item() > 100 * TOLERANCE  # the checkpoint's own weights
    meta = json.loads((out / "ragen2_export.json").read_text())
    assert (meta["step"], meta["policy_version"], meta["lora_merged"]) == (4, 4, False)
    assert (out / "model.safetensors").is_file() and (out / "tokenizer_config.json").is_file()


def test_a_lora_checkpoint_exports_merged(tiny_model_path, tiny_tokenizer, tmp_path):
    from safetensors import safe_open

    overrides = ["model=hf", f"model.path={tiny_model_path}", "recipe=tiny",
                 "cluster.learner_world_size=1", "learner.lora.rank=4", "learner.lora.alpha=8"]
    cfg = load_config(overrides)
    ckpt = tmp_path / "run" / "checkpoints" / "step_000001"
    ckpt.mkdir(parents=True)
    ids = _ids(tiny_tokenizer)
    r = _learner(cfg, tiny_model_path)
    try:
        gen = torch.Generator().manual_seed(0)
        with torch.no_grad():  # adapters as training leaves them: B no longer zero
            for p in r.state.trainable:
                p.add_(0.05 * torch.randn(p.shape, generator=gen))
        r.save(str(ckpt))
        learner = torch.tensor(r.logprobs(ids))
    finally:
        r.shutdown()
    (ckpt / "trainer_state.json").write_text(json.dumps({"step": 1, "policy_version": 1}))
    (ckpt.parents[1] / ".hydra").mkdir()
    (ckpt.parents[1] / ".hydra" / "overrides.yaml").write_text(
        "".join(f"- {o}\n" for o in overrides))
    assert main([str(ckpt.parents[1]), str(tmp_path / "hf")]) == 0  # the run's own overrides
    exported, base = _hf_logprobs(tmp_path / "hf", ids), _hf_logprobs(Path(tiny_model_path), ids)
    gap = (exported - learner).abs().max().item()
    assert gap < TOLERANCE, gap
    assert (base - learner).abs().max().item() > 100 * TOLERANCE
    with safe_open(tmp_path / "hf" / "model.safetensors", "pt") as f:
        assert not [k for k in f.keys() if "lora" in k]


def test_a_checkpoint_that_does_not_fit_the_config_is_refused(tmp_path, capsys):
    assert main([str(tmp_path), str(tmp_path / "out")]) == 2
    assert "neither a checkpoint directory" in capsys.readouterr().err
    with pytest.raises(ExportError):
        find_checkpoint(tmp_path)
