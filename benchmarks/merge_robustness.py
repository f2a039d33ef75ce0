"""Merge the labels of one robustness results file into another (runs measured in a worktree at
another commit land in ``benchmarks/results/robustness.json`` as they are, commit included).

    python benchmarks/merge_robustness.py SRC.json [--into benchmarks/results/robustness.json]

A run already in the target under the same label and key is replaced only if the source's is
newer (``finished``); every other run and label is kept.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from robustness import summarize  # noqa: E402  (benchmarks/robustness.py)


def merge(src: dict, dst: dict) -> list[str]:
    """Merge ``src``'s labels into ``dst`` in place; returns the ``label/run`` keys taken."""
    taken = []
    for name, lab in src["labels"].items():
        into = dst["labels"].setdefault(name, {k: v for k, v in lab.items() if k != "runs"} | {"runs": {}})
        for key, run in lab["runs"].items():
            old = into["runs"].get(key)
            if old is None or run.get("finished", "") > old.get("finished", ""):
                into["runs"][key] = run
                taken.append(f"{name}/{key}")
        into["summary"] = summarize(into["runs"])
    return taken


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("src", type=Path)
    ap.add_argument("--into", type=Path, default=HERE / "results" / "robustness.json")
    args = ap.parse_args()
    dst = json.loads(args.into.read_text())
    taken = merge(json.loads(args.src.read_text()), dst)
    args.into.write_text(json.dumps(dst, indent=1) + "\n")
    print("merged:", ", ".join(taken) or "nothing new")


if __name__ == "__main__":
    main()
