"""MkDocs hook: the generated reference pages (``ragen2.reference``) filled in at build time.

A page holding ``<!-- generated: config-reference -->`` or ``<!-- generated: metrics-reference -->``
gets that marker replaced by the tables generated from the typed schema or the metric glossary.
"""

from __future__ import annotations

MARKERS = {"<!-- generated: config-reference -->": "config_reference",
           "<!-- generated: metrics-reference -->": "metrics_reference"}


def on_page_markdown(markdown, page, config, files):  # noqa: ANN001, ANN201  (MkDocs' signature)
    for marker, name in MARKERS.items():
        if marker in markdown:
            from ragen2 import reference

            markdown = markdown.replace(marker, getattr(reference, name)())
    return markdown
