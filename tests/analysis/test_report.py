"""ragen2-report on one run: samples and template mining (hand-computed), figures, timeline, CLI.

The synthetic run and its hand-worked n-gram shares: tests/analysis/report_fixtures.py.
"""

from __future__ import annotations

import base64
import re
from html.parser import HTMLParser

import pytest

from ragen2.analysis import report_figures as figs
from ragen2.analysis.report import main
from ragen2.analysis.report_run import run_report
from ragen2.analysis.report_samples import (
    highlight,
    load_samples,
    pair_prompts,
    template_ngrams,
    word_spans,
)
from ragen2.collapse.plugin import ngram_signature
from tests.analysis.report_fixtures import EVIL, STEP4, TEMPLATES, make_run, metrics_rows, write_metrics

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


class Page(HTMLParser):
    """Ids, images, text per id'd element (roughly), and every tag seen."""

    def __init__(self, text: str):
        super().__init__()
        self.ids: dict[str, str] = {}
        self.imgs: list[dict[str, str]] = []
        self.tags: list[str] = []
        self.marks: list[str] = []
        self._in_mark = False
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append(tag)
        if "id" in a:
            self.ids[a["id"]] = tag
        if tag == "img":
            self.imgs.append(a)
        if tag == "mark":
            self._in_mark = True
            self.marks.append("")

    def handle_endtag(self, tag):
        if tag == "mark":
            self._in_mark = False

    def handle_data(self, data):
        if self._in_mark:
            self.marks[-1] += data


@pytest.fixture
def run(tmp_path):
    return make_run(tmp_path / "run")


@pytest.fixture(scope="module")
def full_page(tmp_path_factory) -> str:
    """The page of the complete synthetic run (drawn once: each page takes a few seconds)."""
    return run_report(make_run(tmp_path_factory.mktemp("report") / "run"))


# ----------------------------------------------------------------------------- samples, mining
def test_template_ngrams_by_hand(run):
    source, steps = load_samples(run)
    assert source.startswith("panel/") and list(steps) == [1, 4]
    assert [p["key"] for p in steps[4]] == [f"grid {k}" for k in STEP4]
    assert template_ngrams(steps[4], 3) == TEMPLATES
    # step 1 names its map: only "has a hole" / "a hole at" / "hole at row" are shared
    assert template_ngrams(steps[1], 3) == [(("a", "hole", "at"), 1.0), (("has", "a", "hole"), 1.0),
                                            (("hole", "at", "row"), 1.0)]
    assert template_ngrams(steps[4], 3, min_share=0.75, top=2) == TEMPLATES[:2]
    assert template_ngrams(steps[4][:1], 3) == []  # one prompt: no share to speak of


def test_word_spans_cut_words_as_ngram_signature_does():
    for text in ("Let me think step-by-step, ok", "naïve café: Straße 12_b (x,y).", "a", "",
                 "I<|im_start|>  shortest\tsafe path"):
        words = [w for w, _, _ in word_spans(text)]
        grams = ({tuple(words[i:i + 3]) for i in range(len(words) - 2)} if len(words) >= 3
                 else ({tuple(words)} if words else set()))
        assert grams == ngram_signature(text, 3), text


def test_highlight_marks_merged_spans_and_escapes():
    marks = {("let", "me", "think"), ("think", "step", "by")}
    # windows "Let me think" (0-12) and "think step-by" (7-20) overlap: one mark
    assert (highlight("Let me think step-by-step, ok", marks, 3)
            == "<mark>Let me think step-by</mark>-step, ok")
    assert highlight("a <b> c & d", {("a", "b", "c")}, 3) == "<mark>a &lt;b&gt; c</mark> &amp; d"
    assert highlight("<i>x</i>", set(), 3) == "&lt;i&gt;x&lt;/i&gt;"
    assert highlight("go", {("go",)}, 3) == "<mark>go</mark>"  # shorter than n: the whole text


def test_pair_prompts_common_keys_first_then_by_position():
    p = lambda k: {"key": k}  # noqa: E731
    rows = pair_prompts([p("a"), p("b"), p("c")], [p("c"), p("x"), p("a")], 10)
    assert [(lab, a and a["key"], b and b["key"]) for lab, a, b in rows] == [
        ("c", "c", "c"), ("a", "a", "a"), ("b | x", "b", "x")]
    assert len(pair_prompts([p("a"), p("b")], [p("y")], 1)) == 1
    rows = pair_prompts([p("a"), p("b")], [p("y")], 5)
    assert [(lab, b and b["key"]) for lab, _, b in rows] == [("a | y", "y"), ("b", None)]


def test_rollout_archive_when_there_is_no_panel(tmp_path):
    run = make_run(tmp_path / "run", panel=False)
    source, steps = load_samples(run)
    assert source.startswith("rollouts/") and list(steps) == [1, 4]
    assert [(p["key"], p["reasoning"], p["answers"]) for p in steps[1]] == [
        ("grid seed 7", ["seed 7 sample 0 goes down", "seed 7 sample 1 goes down"], ["Down", "Down"]),
        ("grid seed 8", ["seed 8 sample 0 goes down", "seed 8 sample 1 goes down"], ["Down", "Down"])]
    # step 4: "i always go / always go right / go right first / right first seed" in both prompts,
    # "first seed 7" / "first seed 8" in one of the two each (half: still listed)
    assert template_ngrams(steps[4], 3) == [
        (("always", "go", "right"), 1.0), (("go", "right", "first"), 1.0), (("i", "always", "go"), 1.0),
        (("right", "first", "seed"), 1.0), (("first", "seed", "7"), 0.5), (("first", "seed", "8"), 0.5)]
    assert len(template_ngrams(steps[4], 3, min_share=0.51)) == 4
    (run / "metrics.jsonl").unlink()  # the samples only (quick)
    html = run_report(run)
    assert "rollouts/step_*.jsonl.gz (the rollout archive)" in html
    assert "<mark>I always go right first. Seed 7</mark>." in html


def test_a_bad_panel_file_is_skipped_with_a_note(run):
    (run / "panel" / "step_000009.jsonl").write_text('{"key": "p0", "reasoning": "not a list"}\n')
    (run / "metrics.jsonl").unlink()
    html = run_report(run)
    assert "step_000009.jsonl: line 1: &quot;reasoning&quot; must be a list of strings" in html
    assert "step 4</th>" in html  # the last good step is still the last step shown


# ----------------------------------------------------------------------------- figures, timeline
def test_every_curve_is_drawn_from_the_full_run():
    metrics = {r["step"]: r for r in metrics_rows()}
    for curve in figs.CURVES:
        assert figs.curve_figure(curve, metrics) is not None, curve.name
    assert figs.snr_figure(metrics) is not None and figs.diagnosis_figure(metrics) is not None
    # the panel MI's band: lower and upper at each step
    fig = figs.curve_figure(next(c for c in figs.CURVES if c.name == "panel_mi"), metrics)
    band = fig.axes[0].collections[0].get_paths()[0].vertices
    assert band[:, 1].min() == pytest.approx(1.0 / 4) and band[:, 1].max() == pytest.approx(1.4)


def test_diagnosis_rows_label_codes_alerts_and_rollbacks():
    metrics = {r["step"]: r for r in metrics_rows()}
    metrics[5] = {"collapse/diagnosis": 7.0}
    assert figs.diagnosis_rows(metrics) == [
        {"step": 2, "code": 0.0, "label": "healthy", "alert": False, "rollback": False},
        {"step": 3, "code": None, "label": None, "alert": True, "rollback": False},
        {"step": 4, "code": 1.0, "label": "template_collapse", "alert": False, "rollback": True},
        {"step": 5, "code": 7.0, "label": "code 7 (unknown)", "alert": False, "rollback": False},
    ]


# ----------------------------------------------------------------------------- the page
def test_run_page_contents(full_page):
    html = full_page
    page = Page(html)
    for ident in ("summary", "fig-success", "fig-mi", "fig-panel_mi", "fig-retrieval",
                  "fig-grounding", "fig-contrast", "fig-entropy",
                  "fig-reward_spread", "fig-kept_ratio", "fig-action_mi", "fig-diagnosis",
                  "diagnosis-timeline", "fig-snr", "filter-table", "templates", "samples"):
        assert ident in page.ids, ident
    assert "not-measured" not in page.ids and "not measured in this run" not in html
    # every image is an embedded PNG, nothing points outside the file
    assert len(page.imgs) == len(figs.CURVES) + 2
    for img in page.imgs:
        assert img["src"].startswith("data:image/png;base64,")
        assert base64.b64decode(img["src"].split(",", 1)[1])[:8] == PNG_MAGIC
    assert not re.search(r"(src|href)=\"(?!data:)", html) and "script" not in page.tags
    assert "<script" not in html and EVIL not in html  # the model's markup is text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;&lt;img src=x onerror=alert(2)&gt;" in html
    # header: overrides, config, summary
    assert "<code>filter=tiered</code> <code>seed=3</code>" in html and "strategy: top_p" in html
    assert "<td>eval_after</td><td>0.400</td>" in html
    assert "<td>reason</td><td>&quot;&lt;b&gt;stop&lt;/b&gt;&quot;</td>" in html
    # timeline
    assert ('<td>2</td><td><span class="diag-healthy">healthy</span></td><td></td><td></td>' in html)
    assert "<td>3</td><td>—</td><td>alert</td><td></td>" in html
    assert ('<td>4</td><td><span class="diag-template_collapse">template_collapse</span></td>'
            "<td></td><td>rollback</td>") in html
    # the filter / SNR table has every filter/* and snr/* key, steps 1..4
    for key in ("filter/kept_ratio", "filter/zero_std_groups", "filter/score_mean",
                "filter/skipped_steps", "snr/frac_high", "snr/threshold_low"):
        assert f"<td><code>{key}</code></td>" in html
    assert ('<td><code>filter/kept_ratio</code></td><td class="num">0.900</td>'
            '<td class="num">0.800</td>') in html
    # template mining: the hand-worked list, with the step-1 shares (all 0 but none)
    items = re.findall(r"<li><code>([^<]*)</code> in <b>(\d+)%</b> of prompts \(at step 1: (\d+)%\)",
                       html)
    assert items == [(" ".join(g), str(round(s * 100)), "0") for g, s in TEMPLATES]
    # samples: steps 1 and 4 side by side, template words marked in the step-4 text
    assert "<th>step 1</th><th>step 4</th>" in html
    assert "let me think STEP by step about map" in page.marks
    assert "answer: <code>Right p0</code>" in html


def test_absent_metrics_say_not_measured(tmp_path):
    run = make_run(tmp_path / "run", panel=False, rollouts=False)
    write_metrics(run, [{"step": 1, "rollout/success": 0.5}])
    html = run_report(run)
    page = Page(html)
    assert "fig-success" in page.ids and len(page.imgs) == 1
    for name in ("panel_mi", "action_mi", "kept_ratio"):
        assert re.search(rf'<li id="fig-{name}"><b>[^<]*</b>: not measured in this run', html), name
    assert ('id="diagnosis-timeline">not measured in this run' in html
            and 'id="filter-table">not measured in this run' in html)
    assert 'id="samples">not measured in this run' in html
    # a drawn figure names the keys it lacks
    write_metrics(run, [{"step": 1, "collapse/panel/mi": 0.3}])
    assert ("not in this run: collapse/panel/mi_lo, collapse/panel/mi_hi, collapse/panel/mi_floor"
            in run_report(run))


def test_filter_table_shows_at_most_20_evenly_spaced_steps(tmp_path):
    run = make_run(tmp_path / "run", panel=False, rollouts=False)
    write_metrics(run, [{"step": s, "filter/kept_ratio": s / 100} for s in range(1, 31)])
    html = run_report(run)
    # 30 steps, 20 columns: round(i * 29 / 19) for i = 0..19
    steps = re.findall(r"<th>step (\d+)</th>", html)
    assert steps == [str(round(i * 29 / 19) + 1) for i in range(20)]
    assert "20 of the 30 logged steps, evenly spaced" in html


# ----------------------------------------------------------------------------- CLI
def test_cli_writes_report_html(run, tmp_path, capsys):
    (run / "metrics.jsonl").unlink()  # no figures to draw: the page is quick to make
    assert main([str(run)]) == 0
    assert (run / "report.html").read_text().startswith("<!DOCTYPE html>")
    assert capsys.readouterr().out.strip() == f"wrote {run / 'report.html'}"
    assert "no metrics.jsonl: no curves" in (run / "report.html").read_text()
    out = tmp_path / "elsewhere" / "r.html"
    assert main([str(run), "--out", str(out), "--prompts", "1", "--samples", "1"]) == 0
    assert out.read_text().count("<li>") < (run / "report.html").read_text().count("<li>")


@pytest.mark.parametrize("setup, args, message", [
    (None, [], "does not exist"),
    ("empty", [], "is neither a run directory"),
    ("corrupt", [], "metrics.jsonl:2: not valid JSON"),
    ("run", ["--group-by", "seed"], "--group-by is for a sweep folder"),
])
def test_cli_errors_exit_2(tmp_path, capsys, setup, args, message):
    path = tmp_path / "p"
    if setup == "empty":
        (path / "logs").mkdir(parents=True)
    elif setup in ("corrupt", "run"):
        make_run(path)
    if setup == "corrupt":
        (path / "metrics.jsonl").write_text('{"step": 1}\n{oops\n{"step": 3}\n')
    with pytest.raises(SystemExit) as e:
        main([str(path), *args])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("ragen2-report: error: ") and message in err and err.count("\n") == 1
    assert not (path / "report.html").exists()
