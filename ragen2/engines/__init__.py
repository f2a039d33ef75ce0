"""Generation engines behind one interface; chosen by ``engine.name`` from :data:`ENGINES`."""

from ragen2.engines.base import Generation, GenerationEngine, SamplingParams, Weights, named_tensors
from ragen2.registry import Registry

ENGINES: Registry = Registry("engine")


def _hf(*args, **kwargs):
    from ragen2.engines.hf import HFEngine

    return HFEngine(*args, **kwargs)


def _vllm(*args, **kwargs):
    from ragen2.engines.vllm import VLLMEngine

    return VLLMEngine(*args, **kwargs)


ENGINES.add("hf", _hf)
ENGINES.add("vllm", _vllm)

__all__ = ["ENGINES", "Generation", "GenerationEngine", "SamplingParams", "Weights", "named_tensors"]
