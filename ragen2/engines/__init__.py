"""Generation engines behind one interface; chosen by ``engine.name`` from :data:`ENGINES`."""

from ragen2.engines.base import Generation, GenerationEngine, SamplingParams
from ragen2.registry import Registry

ENGINES: Registry = Registry("engine")


def _hf(*args, **kwargs):
    from ragen2.engines.hf import HFEngine

    return HFEngine(*args, **kwargs)


ENGINES.add("hf", _hf)

__all__ = ["ENGINES", "Generation", "GenerationEngine", "SamplingParams"]
