"""The page without surprises, in a real headless Chromium over ``python app.py`` on SmolLM2-135M (the
page's behaviour, not the model's): what tripped a new user in the first five minutes (issue 51).

- the header names the model and one plain line, the figures are in the model picker's details;
- a PDF page is shown large enough to read, at its highlighted passage, with zoom;
- the stats line gives the prompt's reading and the writing rate apart;
- Speedup's one-time timing of the models runs at the app's start, not in a first answer;
- New chat clears the Source tab; the page buttons are a PDF's only; headings lose their "¶";
- the "also remove its documents" label is whole; a reopened chat is back in its mode;
- SIGTERM or Ctrl-C with a tab open (and an answer being written) ends the process, with one line.

    HF_HUB_OFFLINE=1 .venv/bin/python -m pytest tests/ui/test_browser_page.py -q
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import time
from pathlib import Path

import pytest

from localrag.models import IN_A_LINE
from localrag.ui.layout import SOURCE_HELP
from tests.sample_docs import ZEPHYR
from tests.ui.conftest import REPORT_PAGES, make_pdf
from tests.ui.test_browser import (
    COUNT,
    PDF_QUESTION,
    ROOT,
    SMALL_MODEL,
    App,
    _app,
    ask,
    assert_fully_shown,
    open_app,
    pick_mode,
    set_max_tokens,
    wait_text,
    wait_writing,
)

pytestmark = [pytest.mark.browser, pytest.mark.slow]

SPEC = """<html><head><title>Control software</title></head><body>
<h1 id="top">Control software<a class="headerlink" href="#top" title="Link to this heading">¶</a></h1>
<h2 id="path">3.6. Module Path<a class="headerlink" href="#path" title="Link to this heading">¶</a></h2>
<p>The module path of the telescope control software is zephyr.example/control, declared in its go.mod file.</p>
</body></html>"""
SPEC_QUESTION = "What is the module path of the telescope control software?"
MIRROR_QUESTION = "How wide is the Zephyr primary mirror?"
BODY_PT = 11  # the PDF's body text (tests.ui.conftest.make_pdf)
READABLE_PX = 12  # body text at least this tall on screen (the page showed it about 5 px tall)
EXIT_BOUND_S = 15  # the spec says 5 s; a generous bound for a loaded 2-core machine, still far below the 45 s seen


class TimedApp(App):
    """The app with a cache folder of its own: no cost curve measured on this "machine" yet, so its
    start times the model (Speedup's one-time timing)."""

    def start(self, timeout: float = 240) -> TimedApp:
        os.environ["LOCALRAG_CACHE_DIR"] = str(self.tmp / "cache")
        try:
            return super().start(timeout)
        finally:
            del os.environ["LOCALRAG_CACHE_DIR"]


@pytest.fixture
def timed_app(tmp_path):
    _app(tmp_path, SMALL_MODEL)  # skips without Chromium or Playwright
    a = TimedApp(tmp_path, SMALL_MODEL)
    yield a
    a.stop()


@pytest.fixture
def small(tmp_path):
    a = _app(tmp_path, SMALL_MODEL)
    yield a
    a.stop()


def open_panel_link(page, title: str) -> None:
    """Open the citation panel titled ``title...`` of the last answer (under 📚 Sources or 🔎 Also
    searched) and click its link to the Source tab."""
    bot = page.locator("#chatbot")
    for head in (r"📚 Sources \(\d+\)", r"🔎 Also searched \(\d+\)"):
        found = bot.get_by_text(re.compile(head))
        if found.count():
            found.last.click()
    panel = bot.get_by_text(re.compile("^(\\[\\d+\\] )?" + re.escape(title))).last
    panel.wait_for()
    panel.click()
    link = bot.locator(f'a.lr-open[title="open {title}"]').last
    link.wait_for()
    link.click()


def page_geometry(page) -> dict:
    return page.evaluate("""() => {
        const v = document.querySelector('#lr-page-view'), img = v.querySelector('img');
        return {viewW: v.clientWidth, viewH: v.clientHeight, top: v.scrollTop, imgW: img.getBoundingClientRect().width,
                widthPt: parseFloat(v.dataset.widthPt), heightPt: parseFloat(v.dataset.heightPt),
                fy: parseFloat(v.dataset.focusY), ready: v.dataset.lrReady === '1', natural: img.naturalWidth};
    }""")


def wait_geometry(page, ready=lambda g: g["ready"]) -> dict:
    deadline = time.time() + 20
    while time.time() < deadline:
        g = page_geometry(page)
        if ready(g):
            return g
        time.sleep(0.1)
    raise AssertionError(f"the page view never settled: {page_geometry(page)}")


def stops_with_one_line(app: App, sig: signal.Signals) -> None:
    """Send ``sig``: the process ends (a bounded wait that fails with a message), its log gains one
    line, and no traceback."""
    before = len(app.log.read_text())
    app.proc.send_signal(sig)
    try:
        app.proc.wait(EXIT_BOUND_S)
    except Exception:
        pytest.fail(f"the app still runs {EXIT_BOUND_S} s after {sig.name}:\n{app.log.read_text()[before:][-3000:]}")
    added = app.log.read_text()[before:]
    assert "Traceback" not in added and "CancelledError" not in added, added
    assert added.strip().splitlines() == [f"[localrag] {sig.name}: stopping"], added
    assert app.proc.returncode == 0, (app.proc.returncode, added)


def test_the_page_in_its_first_five_minutes(timed_app, tmp_path):
    from playwright.sync_api import sync_playwright

    app = timed_app
    docs = tmp_path / "mydocs"
    docs.mkdir()
    (docs / "zephyr.md").write_text(ZEPHYR)
    (docs / "spec.html").write_text(SPEC)
    make_pdf(docs / "report.pdf", REPORT_PAGES)
    app.start()
    with sync_playwright() as pw:
        browser, page, console = open_app(pw, app.url)
        page.wait_for_selector("#upload-files")

        # 1. the header: the model and one plain line; the figures and the file in the picker's details
        header = wait_text(page, "#model-status", re.escape(SMALL_MODEL), 60)
        assert IN_A_LINE[SMALL_MODEL] in header, header
        for jargon in ("SQuAD", "llama-bench", "ttft", "tokens/s", ".gguf", str(ROOT)):
            assert jargon not in header, (jargon, header)
        # the checkbox's label, whole (it was cut to "also remove its docu")
        assert_fully_shown(page, "#unwatch-delete", "also remove its documents")

        page.set_input_files("#upload-files input[type=file]", [str(p) for p in sorted(docs.iterdir())])
        assert "3 added" in wait_text(page, "#ingest-summary", r"Done", 240)

        # 2. the stats line: the prompt's reading and the writing apart
        text = ask(page, PDF_QUESTION, r"⚡ Plain")[-1]
        line = [ln for ln in text.splitlines() if ln.startswith("⚡ Plain")][-1]
        assert re.search(r"prompt read: [\d,]+ tokens in [\d.]+ s", line), line
        assert re.search(r"writing: \d+ tokens in [\d.]+ s, [\d.]+ tok/s", line) and re.search(r" [\d.]+ s in all", line), line

        # 3. the PDF page: readable, at its passage, zoomable; the page buttons shown
        open_panel_link(page, "report.pdf p.2")
        head = wait_text(page, "#source-head", r"page 2 of 3", 60)
        assert "highlighted" in head, head
        assert page.locator("#source-prev").is_visible() and page.locator("#source-next").is_visible()
        g = wait_geometry(page)
        assert g["natural"] > 1100
        assert g["imgW"] / g["widthPt"] * BODY_PT >= READABLE_PX, g  # body text on screen, in pixels
        passage_y = g["fy"] * g["imgW"] * g["heightPt"] / g["widthPt"]
        assert g["top"] <= passage_y <= g["top"] + g["viewH"] - 20, g  # the highlighted passage in view
        time.sleep(0.5)
        page.screenshot(path=str(tmp_path / "pdf-citation.png"))
        if os.environ.get("LOCALRAG_SHOT_DIR"):  # a look at it, on request
            shutil.copyfile(tmp_path / "pdf-citation.png", Path(os.environ["LOCALRAG_SHOT_DIR"]) / "pdf-citation.png")
        zoom = page.locator("#source-body .lr-zoom")
        zoom.get_by_role("button", name="+").click()
        bigger = wait_geometry(page, lambda x: x["imgW"] > g["imgW"] + 10)
        zoom.get_by_role("button", name="−").click()
        zoom.get_by_role("button", name="−").click()
        wait_geometry(page, lambda x: x["imgW"] < bigger["imgW"] - 10 and x["imgW"] < g["imgW"])
        zoom.get_by_role("button", name="Fit width").click()
        wait_geometry(page, lambda x: abs(x["imgW"] - x["viewW"]) <= 2)
        zoom.get_by_role("button", name="100 %").click()
        wait_geometry(page, lambda x: abs(x["imgW"] - x["widthPt"] * 96 / 72) <= 2)

        # 4. an HTML source: its heading without "¶", and no page buttons
        text = ask(page, SPEC_QUESTION, r"⚡ Plain")[-1]
        assert "¶" not in text and "spec.html § 3.6. Module Path" in text, text
        open_panel_link(page, "spec.html § 3.6. Module Path")
        head = wait_text(page, "#source-head", r"spec\.html", 60)
        assert "§ Control software › 3.6. Module Path" in head and "¶" not in head, head
        assert not page.locator("#source-prev").is_visible() and not page.locator("#source-next").is_visible()

        # 5. New chat: the Source tab no longer shows the last chat's source
        page.click("#new-chat")
        wait_text(page, "#source-head", re.escape(SOURCE_HELP.split(":")[0]), 30)
        assert page.locator("#source-body img").count() == 0 and not page.locator("#source-prev").is_visible()

        # 6. Speedup's first answer: timed at the start, not now; stats that agree with themselves
        timed = r"\[localrag\] Speedup \(RASD\): timed the forward passes of smollm2\S* once in [\d.]+ s"
        deadline = time.time() + 180  # it gave way to the answers above, and runs once the app is idle
        while not re.search(timed, app.log.read_text()):
            assert time.time() < deadline, app.log.read_text()[-2000:]
            time.sleep(0.5)
        pick_mode(page, "Speedup (RASD)")
        text = ask(page, MIRROR_QUESTION, r"⚡ Speedup \(RASD\)")[-1].split(MIRROR_QUESTION)[-1]
        assert "forward passes" not in text and "Timing this model" not in text, text
        line = [ln for ln in text.splitlines() if ln.startswith("⚡ Speedup")][-1]
        assert "vs plain writing" in line and ("draft model idle" not in line or "retrieval alone" in line), line

        # 7. a reopened chat is back in its mode: the Plain chat, then the Speedup one
        checked = "() => document.querySelector('#mode input[type=radio]:checked')?.closest('label')?.innerText"

        def reopen(question: str, mode: str) -> None:
            page.locator("#history").get_by_text(question).first.click()
            wait_text(page, "#chatbot", re.escape(question), 30)
            deadline = time.time() + 20
            while mode not in (page.evaluate(checked) or ""):
                assert time.time() < deadline, f"the reopened {mode} chat left the mode on {page.evaluate(checked)}"
                time.sleep(0.2)

        reopen(PDF_QUESTION, "Plain")
        reopen(MIRROR_QUESTION, "Speedup")
        assert "SQuAD" in page.locator("#model-details").inner_text()  # the figures, in the picker's details
        errors = [e for e in console if "pageerror" in e]
        assert not errors, errors

        # 8. SIGTERM with the tab open: the process ends, one line, no traceback
        stops_with_one_line(app, signal.SIGTERM)
        browser.close()


def test_ctrl_c_while_an_answer_is_written_ends_the_app_with_one_line(small):
    from playwright.sync_api import sync_playwright

    app = small
    app.start()
    with sync_playwright() as pw:
        browser, page, _ = open_app(pw, app.url)
        page.wait_for_selector("#upload-files")
        set_max_tokens(page, 512)
        page.fill("#question textarea", COUNT)
        page.click("#send")
        wait_writing(page, COUNT)
        stops_with_one_line(app, signal.SIGINT)
        browser.close()
