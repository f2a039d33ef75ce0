"""The building blocks of the self-contained HTML reports: escaping, tables, embedded PNG figures.

Every page is one file with no external reference (no script, font or stylesheet to fetch):
figures are PNGs embedded as ``data:image/png;base64`` URIs, the style sheet is inline. Anything
that came from a run (model text, prompts, override values, file names) goes through :func:`esc`.
"""

from __future__ import annotations

import base64
import html
import io
import math
from collections.abc import Iterable, Sequence
from typing import Any

__all__ = ["MISSING", "esc", "fmt", "page", "png_bytes", "png_img", "table"]

MISSING = "—"

CSS = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 1.5em auto; max-width: 1400px; color: #222;
       padding: 0 1em; }
h1 { font-size: 1.5em; } h2 { margin-top: 2em; border-bottom: 1px solid #ccc; }
code, pre { font: 12px/1.4 ui-monospace, monospace; }
pre { white-space: pre-wrap; word-break: break-word; background: #f6f6f6; padding: .4em; margin: 0; }
table { border-collapse: collapse; margin: .5em 0; }
th, td { border: 1px solid #ddd; padding: .25em .5em; vertical-align: top; }
th { background: #f0f0f0; text-align: left; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.figures { display: flex; flex-wrap: wrap; gap: 1em; } .figures figure { flex: 0 1 600px; }
figure { margin: 0; max-width: 820px; } figure.wide { max-width: 100%; }
figure img { max-width: 100%; border: 1px solid #eee; }
figcaption { font-size: 12px; color: #555; }
.missing { color: #888; font-style: italic; }
.scroll { overflow-x: auto; }
table.samples { table-layout: fixed; width: 100%; } table.samples th:first-child { width: 14%; }
table.samples td:first-child code { word-break: break-all; }
.reasoning { white-space: pre-wrap; word-break: break-word; }
.answer { color: #555; font-size: 12px; margin-top: .2em; }
ol.samples { padding-left: 1.5em; margin: .3em 0; } ol.samples li { margin-bottom: .6em; }
mark { background: #ffe08a; }
.diag-healthy { background: #e3f4e1; } .diag-template_collapse { background: #f9d3d0; }
.diag-overfitting { background: #fbe8c8; } .diag-underfitting { background: #dfe5f7; }
.notes li { color: #7a4b00; }
"""


def esc(value: Any) -> str:
    """``value`` as HTML text (quotes escaped too, so it is safe inside an attribute)."""
    return html.escape(str(value), quote=True)


def fmt(v: Any, digits: int = 3) -> str:
    """A finite number with ``digits`` decimals, ints as they are, anything else as "—"."""
    if isinstance(v, bool) or v is None:
        return MISSING
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float) and math.isfinite(v):
        return f"{v:.{digits}f}"
    return MISSING


def table(headers: Sequence[str], rows: Iterable[Sequence[str]], *, id: str | None = None,
          cls: str | None = None, numeric: Sequence[bool] | None = None) -> str:
    """An HTML table. ``headers`` are escaped here; cells are HTML already (escape them first).
    ``numeric[i]`` right-aligns column i."""
    attrs = (f' id="{esc(id)}"' if id else "") + (f' class="{esc(cls)}"' if cls else "")
    num = list(numeric) if numeric is not None else [False] * len(headers)
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f'<td class="num">{c}</td>' if n else f"<td>{c}</td>"
                                    for c, n in zip(r, num)) + "</tr>" for r in rows)
    return f"<table{attrs}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def png_bytes(fig, dpi: int = 90) -> bytes:
    """A matplotlib ``Figure`` (no pyplot needed) rendered as PNG bytes."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return buf.getvalue()


def png_img(png: bytes, alt: str, *, id: str | None = None) -> str:
    """An ``<img>`` whose source is the PNG itself (a data URI)."""
    data = base64.b64encode(png).decode("ascii")
    ident = f' id="{esc(id)}"' if id else ""
    return f'<img{ident} class="figure" alt="{esc(alt)}" src="data:image/png;base64,{data}">'


def page(title: str, body: str) -> str:
    """A complete HTML document: the inline style sheet and ``body`` (HTML)."""
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            # nothing to fetch: forbid it outright, so a stray reference fails loudly
            "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
            "img-src data:; style-src 'unsafe-inline'\">"
            f"<title>{esc(title)}</title><style>{CSS}</style></head>\n<body>\n{body}\n</body></html>\n")
