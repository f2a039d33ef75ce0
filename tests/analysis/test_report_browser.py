"""The reports in a real headless browser: Debian's chromium driven by Playwright, from file://.

The run page of the synthetic run (tests/analysis/report_fixtures.py) and a sweep page must
render every figure (each <img> decoded: naturalWidth > 0), the samples table, the template list
and the diagnosis timeline, with no console error and no request leaving the file. A screenshot
goes to $RAGEN2_ARTIFACTS (else the test's tmp dir); its path is printed.

The browser: $RAGEN2_CHROMIUM, else ``chromium`` on PATH (launch/setup_venv.sh installs Debian's
where it can). Without it, or without the playwright package, the test is skipped, except with
RAGEN2_REQUIRE_BROWSER=1 (.ci/run sets it), where that is a failure.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from ragen2.analysis.report import main as report_main
from tests.analysis.report_fixtures import TEMPLATES, make_run
from tests.analysis.test_sweep_groups import make_sweep

ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]


def _browser() -> str:
    """The chromium executable, or skip (fail when RAGEN2_REQUIRE_BROWSER=1) naming what is missing."""
    path = os.environ.get("RAGEN2_CHROMIUM") or shutil.which("chromium") or ""
    missing = []
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        missing.append("the playwright package (pip install -e '.[test]')")
    if not (path and os.access(path, os.X_OK)):
        missing.append("chromium (apt-get install chromium, as launch/setup_venv.sh does as root; "
                       "or set RAGEN2_CHROMIUM)")
    if missing:
        why = "browser test: no " + " and no ".join(missing)
        if os.environ.get("RAGEN2_REQUIRE_BROWSER") == "1":
            pytest.fail(why + " (RAGEN2_REQUIRE_BROWSER=1)")
        pytest.skip(why)
    return path


def _open(page, path: Path) -> tuple[list[str], list[str]]:
    """Load ``path`` from file://; (console errors and page errors, requests not to that file)."""
    errors, outside = [], []
    page.on("console", lambda m: errors.append(f"console {m.type}: {m.text}")
            if m.type in ("error", "warning") else None)
    page.on("pageerror", lambda e: errors.append(f"page error: {e}"))
    url = path.resolve().as_uri()

    def route(r):
        if r.request.url == url or r.request.url.startswith("data:"):
            r.continue_()
        else:
            outside.append(r.request.url)
            r.abort()

    page.route("**/*", route)
    page.goto(url)
    page.wait_for_load_state("load")
    return errors, outside


def _images(page) -> list[dict]:
    return page.eval_on_selector_all(
        "img", "els => els.map(e => ({id: e.closest('figure') && e.closest('figure').id, "
               "w: e.naturalWidth, h: e.naturalHeight, done: e.complete}))")


def test_reports_render_in_chromium(tmp_path):
    chromium = _browser()
    from playwright.sync_api import sync_playwright

    run = make_run(tmp_path / "run")
    assert report_main([str(run)]) == 0
    sweep = make_sweep(tmp_path / "multirun")
    assert report_main([str(sweep), "--no-job-reports"]) == 0
    shots = Path(os.environ.get("RAGEN2_ARTIFACTS") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            errors, outside = _open(page, run / "report.html")
            imgs = _images(page)
            assert len(imgs) == 13 and all(i["done"] and i["w"] > 0 and i["h"] > 0 for i in imgs), imgs
            assert {i["id"] for i in imgs} >= {"fig-panel_mi", "fig-panel_turns_mi",
                                               "fig-retrieval", "fig-entropy",
                                               "fig-action_mi", "fig-diagnosis", "fig-snr"}
            assert page.locator("#samples tbody tr").count() == 4
            assert page.locator("#samples th").all_inner_texts() == ["prompt", "step 1", "step 4"]
            assert page.locator("#samples mark").count() > 0
            assert page.locator("#templates li").count() == len(TEMPLATES)
            assert page.locator("#templates li").first.inner_text().startswith("by step about")
            timeline = page.locator("#diagnosis-timeline tbody tr").all_inner_texts()
            assert [t.split("\t")[:2] for t in timeline] == [["2", "healthy"], ["3", "—"],
                                                              ["4", "template_collapse"]]
            # the model's markup stayed text: no script ran, no element was injected
            assert page.evaluate("document.scripts.length") == 0
            assert "<script>alert(1)</script>" in page.locator("#samples").inner_text()
            run_shot = shots / "report_run.png"
            page.screenshot(path=str(run_shot), full_page=True)

            page = browser.new_page(viewport={"width": 1400, "height": 900})
            sweep_errors, sweep_outside = _open(page, sweep / "report.html")
            imgs = _images(page)
            assert len(imgs) == 2 and all(i["w"] > 0 for i in imgs), imgs
            assert page.locator("#arms tbody tr").count() == 2
            # one paired step per job: no per-job rho, and points are never pooled
            assert page.locator("#correlations tbody tr").first.inner_text().split("\t")[3] == "—"
            page.screenshot(path=str(shots / "report_sweep.png"), full_page=True)
        finally:
            browser.close()
    assert errors == [] and sweep_errors == []
    assert outside == [] and sweep_outside == []
    assert run_shot.stat().st_size > 10_000
    print(f"screenshots: {run_shot} {shots / 'report_sweep.png'}")
