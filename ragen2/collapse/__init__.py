"""Template-collapse detection: online MI monitor, offline plug-in MI, run diagnosis.

mi.py         mutual_information / mutual_information_subsampled (cross-scored logp matrix),
              choose_negatives, permutation_null (full matrix), permutation_null_subsampled
              (sampled negatives), EMA
plugin.py     reasoning_signatures (n-gram clustering), plugin_mutual_information,
              plugin_permutation_floor (text only, offline)
diagnosis.py  diagnose -> Diagnosis(label, evidence, code): healthy / template_collapse /
              overfitting / underfitting
monitor.py    the per-batch monitor (first turn, later turns, action MI)
panel.py      the fixed probe panel (first turns); panel_turns.py: its later turns at fixed
              mid-episode states; instrument.py: which of them the alert and the diagnosis read
grounding.py  the grounded fraction: the env's own check of the state the reasoning states
              (its optional ground hook), on the batch and the panels, intervals over prompts
contrast.py   the contrast among inputs that differ in one state coordinate (the env's optional
              state_coordinates hook): retrieval and conditional MI a part of the state cannot
              satisfy, on the batch's later turns and the later-turn panel's contrast sets
alert.py      the collapse alert
withhold.py   the minimum sample of every MI and retrieval value (monitor.min_samples)
"""

from ragen2.collapse.diagnosis import (
    DIAGNOSIS_CODES,
    Diagnosis,
    DiagnosisThresholds,
    diagnose,
)
from ragen2.collapse.mi import (
    EMA,
    choose_negatives,
    mutual_information,
    mutual_information_subsampled,
    permutation_null,
    permutation_null_subsampled,
)
from ragen2.collapse.plugin import (
    BIAS_CORRECTIONS,
    ngram_signature,
    plugin_mutual_information,
    plugin_permutation_floor,
    reasoning_signatures,
)

__all__ = [
    "BIAS_CORRECTIONS",
    "DIAGNOSIS_CODES",
    "EMA",
    "Diagnosis",
    "DiagnosisThresholds",
    "choose_negatives",
    "diagnose",
    "mutual_information",
    "mutual_information_subsampled",
    "ngram_signature",
    "permutation_null",
    "permutation_null_subsampled",
    "plugin_mutual_information",
    "plugin_permutation_floor",
    "reasoning_signatures",
]
