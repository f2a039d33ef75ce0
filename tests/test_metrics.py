"""ragen2.metrics: the TensorBoard sink writes its Custom Scalars layout, read back from the event file."""

from __future__ import annotations

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.custom_scalar import layout_pb2

from ragen2.metrics import MetricsLogger


def _layout(run_dir) -> layout_pb2.Layout:
    ea = EventAccumulator(str(run_dir / "tensorboard"))
    ea.Reload()
    events = ea.Tensors("custom_scalars__config__")
    assert len(events) == 1
    layout = layout_pb2.Layout()
    layout.ParseFromString(events[0].tensor_proto.string_val[0])
    return layout


def test_custom_scalars_layout_is_written_with_the_panel_bands(tmp_path):
    logger = MetricsLogger(["tensorboard"], tmp_path)
    logger.log(1, {"collapse/panel/mi": 0.5, "collapse/panel/mi_lo": 0.4, "collapse/panel/mi_hi": 0.7})
    logger.close()
    charts = {c.title: c for cat in _layout(tmp_path).category for c in cat.chart}
    margins = {t: (s.value, s.lower, s.upper) for t, c in charts.items() if c.HasField("margin")
               for s in c.margin.series}
    assert margins == {
        "panel MI (nats)": ("collapse/panel/mi", "collapse/panel/mi_lo", "collapse/panel/mi_hi"),
        "panel retrieval@1": ("collapse/panel/retrieval_acc@1", "collapse/panel/retrieval_acc@1_lo",
                              "collapse/panel/retrieval_acc@1_hi"),
        "panel H(Z|X) (nats)": ("collapse/panel/h_cond", "collapse/panel/h_cond_lo",
                                "collapse/panel/h_cond_hi"),
    }
    assert list(charts["MI and permutation floors"].multiline.tag) == [
        "collapse/mi", "collapse/mi_null", "collapse/panel/mi", "collapse/panel/mi_floor"]
    # the scalars themselves still go where they did
    ea = EventAccumulator(str(tmp_path / "tensorboard"))
    ea.Reload()
    (event,) = ea.Scalars("collapse/panel/mi_hi")
    assert event.step == 1 and event.value == pytest.approx(0.7)
