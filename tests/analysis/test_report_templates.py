"""The report's Jinja2 templates: autoescaped (hostile run names, overrides, summary values and
samples stay text), shipped as package data, declared in pyproject."""

from __future__ import annotations

import json
import tomllib
from importlib.resources import files
from pathlib import Path

from ragen2.analysis.html import environment, page, render, table
from ragen2.analysis.report_run import run_report
from ragen2.analysis.report_sweep import sweep_report
from tests.analysis.report_fixtures import EVIL, make_run

ROOT = Path(__file__).resolve().parents[2]
TEMPLATES = ("page.html.j2", "macros.html.j2", "run.html.j2", "sweep.html.j2", "report.css")


def test_templates_are_package_data_and_autoescaped():
    folder = files("ragen2.analysis").joinpath("templates")
    assert all(folder.joinpath(name).is_file() for name in TEMPLATES)
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "jinja2" in " ".join(data["project"]["dependencies"]).lower()
    globs = data["tool"]["setuptools"]["package-data"]["ragen2.analysis"]
    assert {"templates/*.j2", "templates/*.css"} <= set(globs)
    env = environment()
    assert env.autoescape is True
    for name in TEMPLATES[:4]:
        env.get_template(name)  # parses
    # the standard library's escaping, so pages read as they did before the templates
    assert table(["<h>"], [["a'\"&<b>"]]) == ("<table><thead><tr><th>&lt;h&gt;</th></tr></thead>"
                                              "<tbody><tr><td>a&#x27;&quot;&amp;&lt;b&gt;</td>"
                                              "</tr></tbody></table>")
    assert "<title>&lt;script&gt;</title>" in page("<script>", "<p>body</p>")
    assert "&lt;p&gt;x&lt;/p&gt;" in render("page.html.j2", title="t", body="<p>x</p>")  # a str is text


def test_hostile_strings_in_a_run_and_its_samples_are_text(tmp_path):
    run = make_run(tmp_path / f"run{EVIL}")
    (run / ".hydra" / "overrides.yaml").write_text(json.dumps([f"note={EVIL}"]) + "\n")
    (run / "summary.json").write_text(json.dumps({"reason": EVIL, EVIL: 1}))
    panel = run / "panel" / "step_000004.jsonl"
    recs = [json.loads(line) for line in panel.read_text().splitlines()]
    recs[0]["prompt"], recs[0]["reasoning"][0], recs[0]["answers"][0] = EVIL, EVIL, EVIL
    panel.write_text("".join(json.dumps(r) + "\n" for r in recs))
    html = run_report(run, samples=5)
    assert "<script" not in html and "<img src=x" not in html
    assert html.count("&lt;script&gt;alert(1)&lt;/script&gt;") >= 6  # name, override, summary x2,
    # prompt, reasoning, answer


def test_hostile_job_and_sweep_names_are_text(tmp_path):
    sweep = tmp_path / f"sweep{EVIL}"
    job = sweep / "0"
    (job / ".hydra").mkdir(parents=True)
    (job / ".hydra" / "overrides.yaml").write_text(json.dumps([f"x={EVIL}", "seed=0"]) + "\n")
    (job / "metrics.jsonl").write_text(json.dumps({"step": 1, "eval/success": 0.5}) + "\n")
    html = sweep_report(sweep, [job], sweep / "report.html", job_reports=False)
    assert "<script" not in html and "&lt;script&gt;" in html
