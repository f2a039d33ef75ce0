"""The documentation's generated reference pages: configuration keys and metric keys.

:func:`config_reference` reads the typed schema (:mod:`ragen2.config`): every key, its type, its
value in the default job (``configs/config.yaml`` composed with no override) and its description,
the comment on the field's line (or the comment lines right above it); a section's description is
its dataclass's docstring. :func:`metrics_reference` lays out :mod:`ragen2.glossary`.
``docs/hooks.py`` puts both into the site at build time, and ``tests/test_reference.py`` fails when
a key has no description.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import io
import re
import tokenize
from functools import cache
from typing import Any

from ragen2 import config as schema

__all__ = ["config_keys", "config_reference", "metrics_reference"]


@cache
def _field_comments() -> dict[tuple[str, str], str]:
    """``{(dataclass name, field name): comment}`` read from ragen2/config.py's source."""
    src = inspect.getsource(schema)
    lines = src.splitlines()
    comments = {t.start[0]: t.string.lstrip("#").strip()
                for t in tokenize.generate_tokens(io.StringIO(src).readline)
                if t.type == tokenize.COMMENT}
    out = {}
    for cls in ast.parse(src).body:
        if not isinstance(cls, ast.ClassDef):
            continue
        for st in cls.body:
            if not isinstance(st, ast.AnnAssign) or not isinstance(st.target, ast.Name):
                continue
            text = comments.get(st.lineno, "")
            if not text:  # the comment lines right above the field
                above, ln = [], st.lineno - 1
                while ln in comments and lines[ln - 1].strip().startswith("#"):
                    above.insert(0, comments[ln])
                    ln -= 1
                text = " ".join(above)
            out[(cls.name, st.target.id)] = text
    return out


def _doc(cls: type) -> str:
    return " ".join(inspect.cleandoc(cls.__doc__ or "").split("\n\n")[0].split())


def config_keys() -> list[tuple[str, str, Any, str]]:
    """``(dotted key, type, dataclass default, description)`` for every key of the schema, in
    schema order; a section (a nested dataclass) has type ``section`` and its class docstring."""
    out = []

    def walk(node: Any, prefix: str) -> None:
        for f in dataclasses.fields(node):
            key, value = prefix + f.name, getattr(node, f.name)
            if dataclasses.is_dataclass(value):
                out.append((key, "section", None, _doc(type(value))))
                walk(value, key + ".")
            else:
                out.append((key, str(f.type), value, _field_comments().get(
                    (type(node).__name__, f.name), "")))

    walk(schema.Config(), "")
    return out


def _cell(text: str) -> str:
    """``text`` for a Markdown table cell: pipes escaped, and ``<``/``>`` outside code spans
    (``<module>:<EnvName-v0>`` is not an HTML tag)."""
    parts = re.split(r"(`+[^`]*`+)", text.replace("\n", " "))
    parts = [p if p.startswith("`") else p.replace("<", "&lt;").replace(">", "&gt;")
             for p in parts]
    return "".join(parts).replace("|", "\\|")


def _value(v: Any) -> str:
    if isinstance(v, str):
        return f"`{v}`" if v else '`""`'
    if v is None:
        return "`null`"
    if isinstance(v, bool):
        return f"`{str(v).lower()}`"
    return f"`{v}`"


def config_reference(defaults: Any = None) -> str:
    """Markdown: one table per top-level section of the schema. ``defaults``: a composed
    :class:`ragen2.config.Config` whose values are shown (default: the default job's)."""
    if defaults is None:
        from ragen2.compose import load_config

        defaults = load_config([])
    blocks, rows = [], []
    intro = {k: d for k, t, _, d in config_keys() if t == "section"}

    def flush() -> None:
        if rows:
            blocks.append("| key | type | default job | meaning |\n| --- | --- | --- | --- |\n"
                          + "\n".join(rows))
            rows.clear()

    for key, typ, _, text in config_keys():
        if typ == "section":
            if "." not in key:
                flush()
                blocks.append(f"## `{key}`\n\n{_cell(intro[key])}")
            continue
        value: Any = defaults
        for part in key.split("."):
            value = getattr(value, part)
        if "." not in key and not blocks:
            blocks.append("## Top level")
        rows.append(f"| `{key}` | `{_cell(typ)}` | {_cell(_value(value))} | {_cell(text)} |")
    flush()
    return "\n\n".join(blocks) + "\n"


def metrics_reference() -> str:
    """Markdown: one table per metric family of :mod:`ragen2.glossary`."""
    from ragen2.glossary import FAMILIES

    blocks = []
    for fam in FAMILIES:
        prefixes = ", ".join(f"`{p}`" for p in fam.prefixes)
        rows = "\n".join(f"| `{name}` | {_cell(text)} |" for name, text in fam.fields.items())
        blocks.append(f"## {fam.title}\n\n{fam.about}\n\nPrefixes: {prefixes}\n\n"
                      f"| field | meaning |\n| --- | --- |\n{rows}")
    return "\n\n".join(blocks) + "\n"
