"""The documentation site builds with ``mkdocs build --strict``: a broken link or anchor, a page
missing from the navigation or a nav entry without a page fails here (a few seconds)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_the_site_builds_in_strict_mode(tmp_path):
    pytest.importorskip("mkdocs", reason="the docs extra is not installed (pip install -e .[docs])")
    pytest.importorskip("material", reason="mkdocs-material is not installed")
    r = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir",
                        str(tmp_path / "site")], cwd=ROOT, capture_output=True, text=True,
                       timeout=120, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    site = tmp_path / "site"
    config = (site / "reference" / "configuration" / "index.html").read_text()
    assert "filter.tiered.reestimate_every" in config and "generated: config" not in config
    assert "collapse/panel/mi_floor" not in config
    metrics = (site / "reference" / "metrics" / "index.html").read_text()
    assert "retrieval_acc@&lt;k&gt;" in metrics or "retrieval_acc@<k>" in metrics


def test_every_page_is_in_the_navigation():
    import yaml

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_multi_constructor("", lambda *a: None)  # mkdocs.yml's !!python tags, if any
    nav = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=Loader)["nav"]

    def pages(node):
        if isinstance(node, str):
            yield node
        elif isinstance(node, list):
            for item in node:
                yield from pages(item)
        elif isinstance(node, dict):
            for value in node.values():
                yield from pages(value)

    listed = set(pages(nav))
    on_disk = {p.relative_to(ROOT / "docs").as_posix() for p in (ROOT / "docs").rglob("*.md")}
    assert on_disk == listed, (on_disk - listed, listed - on_disk)
