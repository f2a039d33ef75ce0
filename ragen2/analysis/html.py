"""The self-contained HTML reports' rendering: Jinja2 templates with autoescaping.

The templates (``ragen2/analysis/templates/``, package data) are the pages: ``page.html.j2`` the
document shell with the inline style sheet ``report.css``, ``run.html.j2`` and ``sweep.html.j2``
the two reports, ``macros.html.j2`` tables, figures and sample cells. Every page is one file with
no external reference (no script, font or stylesheet to fetch): figures are PNGs embedded as
``data:image/png;base64`` URIs. Every ``{{ value }}`` is escaped, so anything that came from a
run (model text, prompts, override values, file names) is text; only ``Markup`` (HTML built by a
template or by :func:`ragen2.analysis.report_samples.highlight`) passes as it is. The escaping is
the standard library's :func:`html.escape` (``&quot;``, ``&#x27;``), as before the templates.
"""

from __future__ import annotations

import base64
import functools
import html
import io
import math
from collections.abc import Iterable, Sequence
from typing import Any

import jinja2
from markupsafe import Markup

__all__ = ["MISSING", "Markup", "esc", "fmt", "macro", "page", "png_bytes", "png_img", "render",
           "table"]

MISSING = "—"


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


def _escape(value: Any) -> Any:
    """Every ``{{ value }}``: Markup as it is, anything else through :func:`esc`."""
    return value if hasattr(value, "__html__") else Markup(esc(value))


@functools.cache
def environment() -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.PackageLoader("ragen2.analysis", "templates"),
                              autoescape=True, finalize=_escape, keep_trailing_newline=True,
                              undefined=jinja2.StrictUndefined)


def render(template: str, **context: Any) -> str:
    """The page ``templates/<template>`` rendered with ``context``."""
    return environment().get_template(template).render(**context)


def macro(name: str) -> Any:
    """A macro of ``macros.html.j2``, callable from Python; it returns Markup."""
    return getattr(environment().get_template("macros.html.j2").module, name)


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]], *, id: str | None = None,
          cls: str | None = None, numeric: Sequence[bool] | None = None) -> Markup:
    """An HTML table. ``headers`` are escaped; so is every cell that is not ``Markup``.
    ``numeric[i]`` right-aligns column i."""
    return macro("table")(list(headers), [list(r) for r in rows], id=id, cls=cls,
                          numeric=None if numeric is None else list(numeric))


def png_bytes(fig, dpi: int = 90) -> bytes:
    """A matplotlib ``Figure`` (no pyplot needed) rendered as PNG bytes."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return buf.getvalue()


def png_img(png: bytes, alt: str, *, id: str | None = None) -> Markup:
    """An ``<img>`` whose source is the PNG itself (a data URI)."""
    return macro("img")(base64.b64encode(png).decode("ascii"), alt, id=id)


def page(title: str, body: str) -> str:
    """A complete HTML document: the inline style sheet and ``body`` (HTML)."""
    return render("page.html.j2", title=title, body=Markup(body))
