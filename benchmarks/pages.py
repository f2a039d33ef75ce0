"""The results pages' figures, generated from the committed data.

Every figure the README's tables and ``docs/results/*.md`` show (and the results table of
``docs/how-to/async.md``) sits in a generated block::

    <!-- generated: NAME [ARG ...] -->

    ...Markdown written by results_pages.BLOCKS[NAME](*ARGS)...

    <!-- /generated -->

``python benchmarks/pages.py`` rewrites every block from the JSON under ``benchmarks/``;
``--check`` changes nothing and exits 1 naming each block whose text differs from its data (a
page edited by hand, or data committed without regenerating). ``tests/test_results_pages.py``
runs the check, and fails on a number typed into a results page outside a generated block
(:func:`loose_numbers`; the few kinds of number that are names or settings, not results, are
:data:`ALLOWED`).

Usage::

    python benchmarks/pages.py            # rewrite the blocks in place
    python benchmarks/pages.py --check    # exit 1 listing the stale blocks
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from results_pages import BLOCKS  # noqa: E402  (benchmarks/results_pages/)

#: the pages holding generated blocks
PAGES = ("README.md", "docs/results/benchmarks.md", "docs/results/robustness.md",
         "docs/results/collapse-study.md", "docs/results/real-models.md", "docs/how-to/async.md",
         "docs/development.md", "docs/results/step-account.md", "docs/how-to/gpu-checklist.md",
         "docs/getting-started.md", "docs/reference/env-protocol.md",
         "benchmarks/collapse_study/README.md")
#: the pages where no result may be typed outside a generated block (the changelog is history:
#: it tells how the defaults came about, in the figures of its day)
NO_LOOSE_NUMBERS = ("docs/results/benchmarks.md", "docs/results/robustness.md",
                    "docs/results/collapse-study.md", "docs/results/real-models.md",
                    "docs/results/step-account.md")
BLOCK = re.compile(r"<!-- generated: (?P<name>[\w-]+)(?P<args>(?: [^\s>]+)*) -->\n"
                   r"(?P<body>.*?)<!-- /generated -->", re.S)

#: numbers that are names or settings, not results: (pattern, why it may be typed)
ALLOWED = (
    (r"\b\d{4}-\d{2}-\d{2}(?:/\d{2})?\b", "a date"),
    (r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,40}\b", "a commit"),
    (r"\b[Ii]ssue \d+(?:, item \d+)?", "an issue"),
    (r"\bStudy [123]\b", "a study's name"),
    (r"\bk = \d\b", "the name of trainer.max_staleness=k"),
    (r"\bseeds? \d+(?:(?:-|, | and )\d+)*", "a seed's name"),
    (r"\b\d+(?:\.\d+)?[MB]\b", "a model's size (SmolLM2-135M)"),
    (r"\b\d+-core\b|\b\d+ cores\b|\b\d+ GB machine\b|\b\d+ GiB machine\b", "the machine"),
)
NUMBER = re.compile(r"(?<![\w@./+−-])[+−-]?\d+(?:[.,]\d+)*")
WIDTH = 100
#: a word that would start a list, a heading, a quote or a table row at the start of a line
MARKUP = re.compile(r"[-+*]$|\d+[.)]$|[#>|]")


def wrap(line: str, indent: str = "") -> str:
    """One paragraph or list item in lines of at most :data:`WIDTH` characters where it can be:
    never inside a code span, never before a word that would turn the line into markup."""
    out, cur, ticks = [], "", 0
    for word in line.split(" "):
        if cur.strip() and len(cur) + 1 + len(word) > WIDTH and ticks % 2 == 0 \
                and not MARKUP.match(word):
            out.append(cur)
            cur = indent + word
        else:
            cur = f"{cur} {word}" if cur else word
        ticks += word.count("`")
    return "\n".join(out + [cur])


def reflow(body: str) -> str:
    """A generated block's Markdown with its paragraphs and list items rewrapped (tables kept):
    the block functions write their prose wrapped as it reads in the source."""
    out = []
    for para in body.strip().split("\n\n"):
        if para.startswith("|"):
            out.append(para)
        elif para.startswith("- "):
            items = re.split(r"\n(?=- )", para)
            out.append("\n".join(wrap(" ".join(item.split()), "  ") for item in items))
        else:
            out.append(wrap(" ".join(para.split())))
    return "\n\n".join(out)


def render(text: str) -> str:
    """``text`` with every generated block rewritten from the data."""
    def fill(m: re.Match) -> str:
        if m["name"] not in BLOCKS:  # reported by stale()
            return m[0]
        body = reflow(BLOCKS[m["name"]](*m["args"].split()))
        return f"<!-- generated: {m['name']}{m['args']} -->\n\n{body}\n\n<!-- /generated -->"

    return BLOCK.sub(fill, text)


def blocks(text: str) -> list[tuple[str, str]]:
    """``(marker, body)`` of every generated block of a page."""
    return [(f"generated: {m['name']}{m['args']}", m["body"]) for m in BLOCK.finditer(text)]


def stale(root: Path = ROOT) -> list[str]:
    """``page: block`` for every block whose text is not what its data generate."""
    out = []
    for page in PAGES:
        text = (root / page).read_text()
        out += [f"{page}: unknown block {m['name']}" for m in BLOCK.finditer(text)
                if m["name"] not in BLOCKS]
        fresh = dict(blocks(render(text)))
        out += [f"{page}: {marker}" for marker, body in blocks(text) if fresh[marker] != body]
    return out


def loose_numbers(text: str, allowed=ALLOWED) -> list[str]:
    """``line N: token`` for every number of a page outside its generated blocks, fenced code,
    inline code, link targets and HTML comments, that :data:`ALLOWED` does not explain."""
    def blank(m: re.Match) -> str:  # keep the line count
        return "\n" * m[0].count("\n")

    text = BLOCK.sub(blank, text)
    text = re.sub(r"^```.*?^```", blank, text, flags=re.S | re.M)
    text = re.sub(r"<!--.*?-->", blank, text, flags=re.S)
    text = re.sub(r"`[^`\n]*`", "", text)
    text = re.sub(r"\]\([^)\s]*\)", "]", text)
    for pattern, _ in allowed:
        text = re.sub(pattern, "", text)
    return [f"line {i}: {m[0]}" for i, line in enumerate(text.splitlines(), 1)
            for m in NUMBER.finditer(line)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true",
                    help="change nothing; exit 1 if a block is stale")
    args = ap.parse_args()
    if args.check:
        bad = stale()
        for line in bad:
            print(f"stale: {line}")
        if bad:
            print("regenerate with: python benchmarks/pages.py")
        return 1 if bad else 0
    for page in PAGES:
        path = ROOT / page
        text = path.read_text()
        new = render(text)
        if new != text:
            path.write_text(new)
            print(f"rewrote {page}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
