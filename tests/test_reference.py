"""The generated references cover the code: every config key of the typed schema has a
description, and every metric key the code can log has a glossary entry (``ragen2.glossary``):
each literal key in ``ragen2/``'s source, each key of the smoke run's ``metrics.jsonl`` and of the
collapse study's committed runs."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from ragen2.glossary import describe, patterns
from ragen2.reference import config_keys, config_reference, metrics_reference

ROOT = Path(__file__).resolve().parents[1]
NAMESPACES = ("actor", "rollout", "eval", "filter", "collapse", "snr", "grad_snr", "timing",
              "warm_start", "sync", "trainer", "critic")
KEY = re.compile(r"(%s)/[A-Za-z0-9_@./-]*[A-Za-z0-9_@]" % "|".join(NAMESPACES))


def test_every_config_key_has_a_description():
    keys = config_keys()
    assert len(keys) > 150
    missing = [k for k, _, _, text in keys if not text.strip()]
    assert missing == [], f"config keys without a description (a comment on the field in " \
                          f"ragen2/config.py): {missing}"


def test_the_config_reference_lists_every_key_with_the_default_jobs_value(base_config):
    text = config_reference(base_config)
    for key, typ, _, _ in config_keys():
        if typ != "section":
            assert f"| `{key}` |" in text, key
    assert "| `engine.name` | `str` | `vllm` |" in text  # the default job's, not the dataclass's


def source_keys() -> dict[str, str]:
    """``{key template: file}`` for every metric key written literally in ragen2/ (an f-string's
    fields become ``{}``)."""
    out = {}
    for path in sorted((ROOT / "ragen2").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                s = node.value
            elif isinstance(node, ast.JoinedStr):
                s = "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
            else:
                continue
            if KEY.fullmatch(s.replace("{}", "x")):
                out[s] = str(path.relative_to(ROOT))
    return out


def _documented(template: str) -> bool:
    """Some documented key fits ``template`` ({} = any segment text), or ``template`` is the
    prefix keys are built from (``warm_start/demo`` + ``/success``, ``grad_snr/b`` + a bucket)."""
    examples = [p.replace("<env>", "frozenlake").replace("<k>", "1").replace("<i>", "1")
                .replace("<grade>", "low").replace("<term>", "kl") for p, _, _ in patterns()]
    if "{}" not in template:
        return describe(template) is not None or any(
            e.startswith(template) and (template[-1] in "/_" or e[len(template)] in "/_"
                                        or e[len(template)].isdigit()) for e in examples)
    rx = re.compile(re.escape(template).replace(r"\{\}", "[^/]+(?:/[^/]+)*"))
    return any(rx.fullmatch(e) for e in examples)


def test_every_metric_key_in_the_source_has_a_glossary_entry():
    keys = source_keys()
    assert len(keys) > 60, keys
    missing = {k: f for k, f in keys.items() if not _documented(k)}
    assert missing == {}, f"metric keys without an entry in ragen2/glossary.py: {missing}"


def test_the_glossary_reads_keys_with_placeholders():
    assert "reward spread" in describe("rollout/in_group_reward_std")
    assert describe("eval/frozenlake6/success") == describe("eval/success")
    assert describe("collapse/panel/turns/retrieval_acc@8") is not None
    assert describe("grad_snr/b3/kl_norm_raw") is not None
    assert describe("snr/batch_frac_medium") is not None
    assert describe("collapse/no_such_key") is None and describe("rollout/a/b/c") is None
    assert "## MI monitor" in metrics_reference()


def _logged_keys(paths) -> set[str]:
    keys = set()
    for p in paths:
        for line in Path(p).read_text().splitlines():
            try:
                keys |= set(json.loads(line))
            except ValueError:
                pass
    return keys


def test_every_key_of_the_committed_study_runs_has_an_entry():
    runs = sorted((ROOT / "benchmarks").rglob("metrics.jsonl"))
    if not runs:
        pytest.skip("no committed run under benchmarks/")
    missing = sorted(k for k in _logged_keys(runs) if describe(k) is None)
    assert missing == []


@pytest.mark.smoke
def test_every_key_the_smoke_run_logged_has_an_entry(four_steps):
    missing = sorted(k for k in _logged_keys([four_steps / "metrics.jsonl"]) if describe(k) is None)
    assert missing == []
