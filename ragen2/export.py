"""``ragen2 export``: a training checkpoint as a Hugging Face model folder.

The folder is what ``transformers.AutoModelForCausalLM.from_pretrained`` and vLLM load: the
policy's weights as safetensors under the base model's names, the base model's ``config.json``,
its tokenizer (chat template included) and ``generation_config.json``. A LoRA policy is exported
merged, ``W + (alpha / rank) * B @ A`` on every adapted layer: the same merge the rollout engines
receive at every weight sync (:func:`ragen2.learner.weights.named_full_weights`), so the folder
computes what the learner computed.

Which base model and which adapters a checkpoint belongs to is the run's config: the overrides
the run was started with (``RUN_DIR/.hydra/overrides.yaml``) plus any given here.
``ragen2_export.json`` in the folder names the checkpoint, its step and policy version.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Sequence

PROG = "ragen2 export"
POLICY_FILE = "policy.pt"


class ExportError(RuntimeError):
    """The checkpoint cannot be exported (not found, or it does not fit the run's config)."""


def find_checkpoint(path: str | Path) -> Path:
    """``path`` itself when it is a checkpoint directory, else the newest complete checkpoint of
    the run directory ``path``."""
    from ragen2.learner import checkpoint

    path = Path(path)
    if (path / checkpoint.STATE_FILE).is_file():
        return path
    ckpt = checkpoint.latest(path)
    if ckpt is None:
        raise ExportError(f"{path} is neither a checkpoint directory (with "
                          f"{checkpoint.STATE_FILE}) nor a run directory with a complete "
                          "checkpoint under checkpoints/")
    return ckpt


def run_dir_of(ckpt: Path) -> Path:
    """The run directory a checkpoint belongs to (``RUN_DIR/checkpoints/step_XXXXXX``)."""
    return ckpt.parent.parent


def run_overrides(run_dir: Path) -> list[str]:
    """The overrides the run was started with (Hydra's ``.hydra/overrides.yaml``; [] without)."""
    import yaml

    path = run_dir / ".hydra" / "overrides.yaml"
    return [str(o) for o in yaml.safe_load(path.read_text()) or []] if path.is_file() else []


def run_config(ckpt: Path, overrides: Sequence[str] = ()):  # noqa: ANN201  (a Config)
    """The config of the run that wrote ``ckpt``, with ``overrides`` on top."""
    from ragen2.compose import load_config

    return load_config([*run_overrides(run_dir_of(ckpt)), *overrides])


def load_policy(cfg, ckpt: Path, model_path: str):  # noqa: ANN001, ANN201
    """The checkpoint's policy as a plain HF causal LM in fp32 (a LoRA policy merged)."""
    import torch

    from ragen2.models.loading import load_causal_lm

    kwargs = dict(dtype="float32", trust_remote_code=cfg.model.trust_remote_code)
    model = load_causal_lm(model_path, **kwargs)
    from ragen2.learner.sharded import read_model_state

    state = read_model_state(ckpt)  # sharded (policy/) or full (policy.pt)
    if not any(".lora_A." in k for k in state):
        missing, unexpected = model.load_state_dict(state, strict=False)
        tied = {n for n in missing if _tied_away(model, n)}
        if set(missing) - tied or unexpected:
            raise ExportError(f"{ckpt}/{POLICY_FILE} does not fit {model_path}: missing "
                              f"{sorted(set(missing) - tied)[:3]}, unexpected {unexpected[:3]}")
        return model
    if cfg.learner.lora.rank <= 0:
        raise ExportError(f"{ckpt}/{POLICY_FILE} holds LoRA adapters but the run's config has "
                          "learner.lora.rank=0: pass the run's learner.lora.* overrides")
    from ragen2.learner.lora import wrap_lora
    from ragen2.learner.weights import named_full_weights

    wrapped = wrap_lora(model, cfg.learner.lora)
    adapters = {n for n, p in wrapped.named_parameters() if p.requires_grad}
    if set(state) != adapters:
        raise ExportError(f"{ckpt}/{POLICY_FILE} does not match learner.lora of the run's config: "
                          f"missing {sorted(adapters - set(state))[:3]}, unexpected "
                          f"{sorted(set(state) - adapters)[:3]}")
    wrapped.load_state_dict(state, strict=False)
    merged = dict(named_full_weights(wrapped))
    plain = load_causal_lm(model_path, **kwargs)
    missing, unexpected = plain.load_state_dict(merged, strict=False)
    assert not unexpected and all(_tied_away(plain, n) for n in missing), (missing, unexpected)
    return plain


def _tied_away(model, name: str) -> bool:  # noqa: ANN001
    """``name`` is the output head tied to the input embedding (exported once, under the latter)."""
    return name == "lm_head.weight" and bool(getattr(model.config, "tie_word_embeddings", False))


def export_checkpoint(ckpt: str | Path, out: str | Path, cfg, model_path: str) -> Path:  # noqa: ANN001
    """Write the policy of checkpoint ``ckpt`` (of a run configured by ``cfg``, whose base model
    is at ``model_path``) into the HF model folder ``out``; returns ``out``."""
    from ragen2.learner import checkpoint
    from ragen2.models.loading import load_tokenizer

    ckpt, out = Path(ckpt), Path(out)
    model = load_policy(cfg, ckpt, model_path)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    load_tokenizer(model_path, trust_remote_code=cfg.model.trust_remote_code).save_pretrained(out)
    state = checkpoint.read_state(ckpt)
    (out / "ragen2_export.json").write_text(json.dumps({
        "checkpoint": str(ckpt.resolve()), "step": state.get("step"),
        "policy_version": state.get("policy_version"), "base_model": model_path,
        "lora_merged": cfg.learner.lora.rank > 0}, indent=1) + "\n")
    return out


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG, description="Export a training checkpoint to a Hugging Face model folder that "
        "transformers and vLLM load (LoRA adapters merged).")
    p.add_argument("checkpoint", type=Path,
                   help="a checkpoint directory (RUN_DIR/checkpoints/step_XXXXXX) or a run "
                        "directory (its latest checkpoint)")
    p.add_argument("out", type=Path, help="the model folder to write")
    p.add_argument("overrides", nargs="*",
                   help="config overrides on top of the run's own (RUN_DIR/.hydra/overrides.yaml); "
                        "a run started from Python has none saved: pass its model.* and "
                        "learner.lora.* overrides")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    from ragen2.config import ConfigError
    from ragen2.train import resolve_model_path

    args = _parser().parse_args(argv)
    try:
        ckpt = find_checkpoint(args.checkpoint)
        cfg = run_config(ckpt, args.overrides)
        out = export_checkpoint(ckpt, args.out, cfg, resolve_model_path(cfg))
    except (ExportError, ConfigError, FileNotFoundError) as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {out} (from {ckpt})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
