"""ragen2/builtin_models.py: the models ragen2 builds itself, by name, and which models are random
(the tiny model's build itself: tests/models/test_tiny.py)."""

from __future__ import annotations

from ragen2.builtin_models import BUILT_IN, random_init
from ragen2.config import ModelConfig
from ragen2.models.tiny import MARKER_FILE


def test_the_built_in_models():
    assert sorted(BUILT_IN.names()) == ["smollm2", "tiny"]


def test_random_init_is_the_tiny_model_or_a_folder_it_saved(tmp_path):
    assert random_init(ModelConfig(name="tiny"))
    assert not random_init(ModelConfig(name="smollm2"))  # pretrained
    assert not random_init(ModelConfig(path=str(tmp_path)))  # a folder of someone's model
    (tmp_path / MARKER_FILE).write_text("{}")
    assert random_init(ModelConfig(path=str(tmp_path)))  # the tiny model's marker file
