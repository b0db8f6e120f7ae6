"""End to end in a real headless Chromium: upload, ingest, stop an ingest, ask, cite, open the cited
page, check, refuse, switch modes, restart.

Starts ``python app.py`` on a free port with its own data and index folders,
drives the page with Playwright (Debian's /usr/bin/chromium; Playwright's own
browser download is not used). The first test runs the default model (Qwen2.5-Coder-1.5B): a
supported answer and a PDF citation opened at its page; it saves the README screenshot of that
to ``docs/screenshot.png`` when LOCALRAG_UPDATE_SCREENSHOT=1. The others run SmolLM2-135M
(``--model smollm2-135m-instruct``), which answers in a fraction of the time on two cores: the
refusals, Stop, the modes and the restart test the page, not the model.

    HF_HUB_OFFLINE=1 .venv/bin/python -m pytest tests/ui/test_browser.py -q -m browser
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path

import pytest

from tests.conftest import require_or_skip
from tests.sample_docs import GARDEN as GARDEN_NOTES
from tests.sample_docs import ZEPHYR
from tests.ui.conftest import REPORT_PAGES, make_pdf

pytestmark = [pytest.mark.browser, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = os.environ.get("LOCALRAG_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
SCREENSHOT = ROOT / "docs" / "screenshot.png"

GARDEN = GARDEN_NOTES + "The compost bins are emptied on the first day of each month.\n"
DEFAULT_MODEL = "qwen2.5-coder-1.5b-instruct"
SMALL_MODEL = "smollm2-135m-instruct"
# Answered from zephyr.md by both models.
SUPPORTED = "Where was the Zephyr telescope assembled?"
# The screenshot's question, answered from report.pdf page 2: one of eight questions answerable from
# these three files that were asked of the default model (Plain, greedy; it answered 7 of them correctly
# and supported, see the README's caption), picked so the picture shows a PDF page and its passage.
PDF_QUESTION = "How far did the glacier retreat over the season?"
# Not in the documents; the bundled model answers it anyway with a made-up dose ("... is 100mg/day."
# after the Zephyr question, whose key terms the follow-up search adds; "... 2-3 grams per day" alone).
UNANSWERABLE = "What is the recommended dosage of ibuprofen for adults?"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class App:
    """``python app.py`` as a subprocess on its own port and folders."""

    def __init__(self, tmp: Path, model: str | None = None) -> None:
        self.tmp, self.port, self.proc, self.model = tmp, free_port(), None, model
        self.log = tmp / "app.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    def start(self, timeout: float = 240) -> App:
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "ANONYMIZED_TELEMETRY": "False",
               "GRADIO_ANALYTICS_ENABLED": "False", "LOCALRAG_DATA_DIR": str(self.tmp / "data"),
               "LOCALRAG_INDEX_DIR": str(self.tmp / "index")}
        with open(self.log, "a") as log:  # the child keeps its own copy of the descriptor
            self.proc = subprocess.Popen(
                [sys.executable, "app.py", "--port", str(self.port), "--data-dir", str(self.tmp / "data"),
                 "--index-dir", str(self.tmp / "index"), *(["--model", self.model] if self.model else [])],
                cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"app.py exited with {self.proc.returncode}:\n{self.log.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(self.url, timeout=5) as r:
                    if r.status == 200:
                        return self
            except OSError:
                time.sleep(1)
        pytest.fail(f"app.py did not serve within {timeout} s:\n{self.log.read_text()[-3000:]}")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def require_browser() -> None:
    """Chromium and Playwright are there; a failure under CI, else a skip (``require_or_skip``)."""
    if not Path(CHROMIUM).exists():
        require_or_skip(f"{CHROMIUM} not installed (scripts/setup.sh --dev installs Debian's chromium)")
    if importlib.util.find_spec("playwright") is None:
        require_or_skip("playwright is not installed (scripts/setup.sh --dev installs it)")


def _app(tmp_path, model: str | None):
    require_browser()
    return App(tmp_path, model)


@pytest.fixture
def app(tmp_path):
    """The app on its default model."""
    a = _app(tmp_path, None)
    yield a
    a.stop()


@pytest.fixture
def small_app(tmp_path):
    """The app on SmolLM2-135M: the page's behaviour, at a fraction of the answer time."""
    a = _app(tmp_path, SMALL_MODEL)
    yield a
    a.stop()


def wait_text(page, selector: str, pattern: str, timeout_s: float = 180) -> str:
    """Wait until the element's text matches ``pattern`` (regex); return the text."""
    deadline = time.time() + timeout_s
    text = ""
    while time.time() < deadline:
        loc = page.locator(selector)
        if loc.count():
            text = loc.first.inner_text()
            if re.search(pattern, text):
                return text
        time.sleep(0.25)
    raise AssertionError(f"{selector} never matched {pattern!r}; last text:\n{text[-2000:]}")


def ask(page, question: str, stats_pattern: str, timeout_s: float = 240) -> list[str]:
    """Send a question; return the distinct texts the chat showed while the answer streamed."""
    bot = page.locator("#chatbot")
    before = len(re.findall(stats_pattern, bot.inner_text()))
    page.fill("#question textarea", question)
    page.click("#send")
    seen: list[str] = []
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        text = bot.inner_text()
        if not seen or seen[-1] != text:
            seen.append(text)
        if len(re.findall(stats_pattern, text)) > before:
            return seen
        time.sleep(0.05)
    raise AssertionError(f"no answer with {stats_pattern!r} within {timeout_s} s; chat:\n{seen[-1][-2000:]}")


def watch_console(page) -> list[str]:
    """The page's console errors and warnings and its uncaught exceptions, as they come."""
    seen: list[str] = []
    page.on("console", lambda m: seen.append(f"{m.type}: {m.text}") if m.type in ("error", "warning") else None)
    page.on("pageerror", lambda e: seen.append(f"pageerror: {e}"))
    return seen


def open_app(pw, url: str):
    """Chromium on the app's page (1600x1000, 60 s timeouts): (browser, page, its console messages)."""
    browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
    page = browser.new_page(viewport={"width": 1600, "height": 1000})
    page.set_default_timeout(60_000)
    console = watch_console(page)
    page.goto(url)
    return browser, page, console


def assert_fully_shown(page, container: str, text: str) -> None:
    """``text`` is rendered whole inside ``container``: not clipped, not pushed out of view."""
    cell = page.locator(container).get_by_text(text, exact=False).filter(visible=True).first
    box, outer = cell.bounding_box(), page.locator(container).bounding_box()
    assert box and outer and box["x"] >= outer["x"] - 1 and box["x"] + box["width"] <= outer["x"] + outer["width"] + 1, (
        f"{text!r} at {box} lies outside {container} {outer}")
    clipped = cell.evaluate("e => e.scrollWidth > e.clientWidth + 1")
    assert not clipped, f"{text!r} is cut off"


def assert_one_line(page, container: str, text: str) -> None:
    """``text`` is shown on one line inside ``container`` (a narrow column wrapped "chunks" as
    "chunk/s")."""
    cell = page.locator(container).get_by_text(text, exact=True).filter(visible=True).first
    lines = cell.evaluate("""e => { const r = document.createRange(); r.selectNodeContents(e);
        return new Set([...r.getClientRects()].filter(x => x.width > 0).map(x => Math.round(x.top))).size; }""")
    assert lines == 1, f"{text!r} in {container} wraps onto {lines} lines"


def pick_mode(page, label: str) -> str:
    page.get_by_role("tab", name=re.compile("Mode & model")).click()
    page.locator("#mode label", has_text=label).click()
    return wait_text(page, "#mode-note", r"^Mode .* (is ready|unavailable)", 60)


def loose_files(data: Path) -> list[Path]:
    """Files lying in the upload temp folder itself, or among the empty files Gradio's File leaves
    (every upload made one in <data dir>/tmp)."""
    temp = data / "tmp"
    found = [p for p in temp.iterdir() if p.is_file()] if temp.exists() else []
    strays = temp / "unused-upload-files"
    return found + ([p for p in strays.iterdir()] if strays.exists() else [])


def test_the_default_model_answers_and_a_pdf_citation_opens_its_page(app, tmp_path):
    """On the default model: upload through the page, a supported answer with its [1] and the
    highlighted span, a PDF citation opened at its page (image, page label, next and previous page),
    the screenshot; no empty files left by the uploads; the list fits its columns."""
    from playwright.sync_api import sync_playwright

    docs = tmp_path / "mydocs"
    docs.mkdir()
    (docs / "zephyr.md").write_text(ZEPHYR)
    (docs / "garden.txt").write_text(GARDEN)
    make_pdf(docs / "report.pdf", REPORT_PAGES)
    app.start()
    with sync_playwright() as pw:
        browser, page, console = open_app(pw, app.url)
        page.wait_for_selector("#upload-files")
        folder_zone = page.locator("#upload-folder").inner_text()
        assert "Drop a folder here" in folder_zone and "Drop File Here" not in folder_zone, folder_zone
        assert "Drop documents on the right, then ask." in page.locator("#chatbot").inner_text()

        # 1. upload three files through the page; wait for ingestion with per-file results
        page.set_input_files("#upload-files input[type=file]",
                             [str(docs / "zephyr.md"), str(docs / "garden.txt"), str(docs / "report.pdf")])
        summary = wait_text(page, "#ingest-summary", r"Done", 240)
        assert "3 added" in summary and "0 failed" in summary, summary
        listed = wait_text(page, "#doc-list", r"zephyr\.md[\s\S]*|garden\.txt", 30)
        assert "zephyr.md" in listed and "garden.txt" in listed and "report.pdf" in listed
        stored = sorted(p.name for p in (tmp_path / "data" / "uploads" / "default").iterdir())
        assert stored == ["garden.txt", "report.pdf", "zephyr.md"]
        assert loose_files(tmp_path / "data") == []  # no empty tmp* file per upload
        wait_text(page, "#chatbot", "Ask about your 3 documents in “default”", 30)  # the chat's placeholder
        for text in ("chunks", "status", "indexed"):
            assert_one_line(page, "#doc-list", text)

        # 2. ask a question answered by one file: streamed answer, [1] after the supported sentence,
        # the citation naming that file opens to its chunk with the supporting span highlighted
        seen = ask(page, SUPPORTED, r"⚡ Plain")
        streaming = [t for t in seen if SUPPORTED in t and "⚡ Plain" not in t]
        assert streaming, "the page never showed the answer in progress (pending or partial)"
        final = seen[-1]
        answer = final.split(SUPPORTED, 1)[1].split("📚", 1)[0].strip()
        assert re.search(r"Quillfield\.?\s*\[1\]", answer), final  # a sentence or, asked to be brief, the place
        assert "not found in your documents" not in final and re.search(r"tok/s", final)
        bot = page.locator("#chatbot")
        bot.get_by_text(re.compile(r"📚 Sources \(1\)")).last.click()
        first = bot.get_by_text(re.compile(r"^\[1\] ")).last
        first.wait_for()
        assert "zephyr.md" in first.inner_text(), bot.inner_text()
        first.click()  # expand the citation to its chunk text
        wait_text(page, "#chatbot", r"assembled in the town of Quillfield", 20)
        marked = bot.locator("mark").filter(visible=True)
        marked.first.wait_for(timeout=20_000)
        assert "Quillfield" in " ".join(marked.all_inner_texts())
        assert marked.first.evaluate("e => getComputedStyle(e).backgroundColor") != "rgba(0, 0, 0, 0)"

        # 3. a question answered from the PDF: its [1] opens the cited page in the Source tab, the
        # passage highlighted, with the next and previous pages a click away
        final = ask(page, PDF_QUESTION, r"⚡ Plain")[-1]
        answer = final.split(PDF_QUESTION, 1)[1].split("📚", 1)[0]
        assert re.search(r"forty-one|41", answer, re.I) and re.search(r"\[1\]", answer), final
        bot.locator("a.lr-open.lr-ref-s-1-1").first.click()  # the [1] after the PDF answer's sentence
        head = wait_text(page, "#source-head", r"page 2 of 3", 60)
        assert "[1] report.pdf p.2" in head and "highlighted" in head, head
        image = page.locator("#source-body img#lr-page-image")
        image.wait_for(state="visible")
        assert image.evaluate("e => e.complete && e.naturalWidth") > 800
        assert image.get_attribute("alt") == "report.pdf, page 2" and image.get_attribute("src").startswith(
            "data:image/png;base64,")  # inline: no route serves the file
        bot.get_by_text(re.compile(r"📚 Sources \(1\)")).last.click()
        cited = bot.get_by_text(re.compile(r"^\[1\] report\.pdf p\.2")).last
        cited.wait_for()
        cited.click()  # the chunk: the page's wrapped lines read as one paragraph
        wait_text(page, "#chatbot", r"second season measured the northern tongue every week from May to "
                                    r"September\. The ice retreated", 20)
        time.sleep(1.0)  # let the panel's opening animation finish
        page.screenshot(path=str(tmp_path / "shot.png"))
        if os.environ.get("LOCALRAG_UPDATE_SCREENSHOT"):  # refresh the README's picture on request only
            SCREENSHOT.parent.mkdir(exist_ok=True)
            shutil.copyfile(tmp_path / "shot.png", SCREENSHOT)
        page.click("#source-next")
        head = wait_text(page, "#source-head", r"page 3 of 3", 60)
        assert "the cited passage is on page 2" in head
        assert page.locator("#source-next").is_disabled() and image.get_attribute("alt") == "report.pdf, page 3"
        page.click("#source-prev")
        assert "highlighted" in wait_text(page, "#source-head", r"page 2 of 3", 60)
        offset_errors = [e for e in console if "offsetWidth" in e]
        assert not offset_errors, offset_errors
        browser.close()

    # the same process serves the OpenAI-compatible API beside the page
    with urllib.request.urlopen(app.url + "v1/models", timeout=30) as r:
        assert json.load(r)["data"][0]["id"] == DEFAULT_MODEL


def many_notes(folder: Path, n: int, words: int) -> list[Path]:
    """``n`` Markdown notes of ``words`` words each, all different (identical chunks are stored once)."""
    vocab = ["falcon", "ridge", "copper", "harbor", "lantern", "glacier", "meadow", "river", "beacon", "orchard",
             "quarry", "tide", "mirror", "survey", "season", "bridge", "workshop", "valley", "cliff", "pigeon"]
    folder.mkdir()
    out = []
    for i in range(n):
        body = " ".join(vocab[(i * 7 + k * k) % len(vocab)] + ("." if k % 12 == 11 else "") for k in range(words))
        out.append(folder / f"note{i:03d}.md")
        out[-1].write_text(f"# Note {i}\n\nNote {i}: {body}\n")
    return out


def test_refusals_a_stopped_ingest_the_modes_and_a_restart(small_app, tmp_path):
    """On SmolLM2-135M: an unsupported sentence marked and a refusal; a failed upload listed apart; an
    ingest stopped from the page and continued; Speedup's stats and plot; Grounded's drafts (its
    rationale not repeated under the answer); a restart keeps the chats and the index."""
    from playwright.sync_api import sync_playwright

    app = small_app
    docs = tmp_path / "mydocs"
    docs.mkdir()
    (docs / "zephyr.md").write_text(ZEPHYR)
    (docs / "garden.txt").write_text(GARDEN)
    (docs / "broken.pdf").write_bytes(b"%PDF-1.7\n this is not really a PDF")
    notes = many_notes(tmp_path / "notes", 20, 8000)  # ~1,000 chunks: seconds to embed, time to press Stop
    app.start()
    with sync_playwright() as pw:
        browser, page, console = open_app(pw, app.url)
        page.wait_for_selector("#upload-files")
        page.set_input_files("#upload-files input[type=file]", [str(docs / "zephyr.md"), str(docs / "garden.txt")])
        assert "2 added" in wait_text(page, "#ingest-summary", r"Done", 240)
        final = ask(page, SUPPORTED, r"⚡ Plain")[-1]
        answer = final.split(SUPPORTED, 1)[1].split("📚", 1)[0].strip()
        assert "Quillfield" in answer and re.search(r"\.\s*\[1\]", answer), final
        assert "🔎 Also searched (1)" in final
        bot = page.locator("#chatbot")

        # 1. a sentence the documents do not hold is underlined with dots, "not found in your
        # documents" on hover, and the answer carries the warning with what was searched
        text = ask(page, UNANSWERABLE, r"⚡ Plain")[-1].split(UNANSWERABLE, 1)[1]
        assert "Your documents do not support this answer" in text and "What was searched" in text, text
        flagged = bot.locator("span.lr-unsupported").last
        assert flagged.get_attribute("title").startswith("not found in your documents")
        assert flagged.evaluate("e => getComputedStyle(e).textDecorationStyle") == "dotted"
        assert "ibuprofen" in flagged.inner_text() and flagged.inner_text().strip() in text

        # 1b. set to refuse (in a new chat, so the question has no history): the refusal replaces the
        # answer, which stays in a labelled, collapsed panel
        page.get_by_role("tab", name=re.compile("Mode & model")).click()
        page.locator("#on-unsupported label", has_text="Refuse:").click()
        page.click("#new-chat")
        time.sleep(0.5)
        text = ask(page, UNANSWERABLE, r"⚡ Plain")[-1].split(UNANSWERABLE, 1)[1]
        assert "🚫 Your documents do not support an answer to this question" in text, text
        assert f'What was searched: searched "{UNANSWERABLE}"' in text
        kept = bot.get_by_text("⚠️ Unsupported answer (not found in your documents)").last
        kept.wait_for()
        assert "ibuprofen for adults is" not in text  # collapsed until opened
        kept.click()
        wait_text(page, "#chatbot", r"ibuprofen for adults is", 20)
        page.locator("#on-unsupported label", has_text="Mode default").click()
        page.get_by_role("tab", name=re.compile("Documents")).click()
        page.locator("#history").get_by_text(SUPPORTED).click()  # back to the first chat
        wait_text(page, "#chatbot", re.escape(SUPPORTED), 30)

        # 2. a corrupt upload fails with its reason, as a message in the page, listed apart from the
        # documents
        page.set_input_files("#upload-files input[type=file]", str(docs / "broken.pdf"))
        summary = wait_text(page, "#ingest-summary", r"Done: 0 added", 120)
        assert "1 failed" in summary, summary
        failed = re.search(r"broken\.pdf\s+failed\s+0\s+(\S.*)", page.locator("#ingest-table").inner_text())
        assert failed, page.locator("#ingest-table").inner_text()
        assert_fully_shown(page, "#ingest-table", failed.group(1).strip())  # the reason is not cut off
        assert "broken.pdf" in wait_text(page, "#failed-list", r"broken\.pdf", 30)
        assert "broken.pdf" not in page.locator("#doc-list").inner_text()

        # 3. an ingest stopped from the page keeps what it finished, lists what it did not do, and
        # Continue does the rest
        page.set_input_files("#upload-files input[type=file]", [str(p) for p in notes])
        page.locator("#ingest-stop").wait_for(state="visible", timeout=120_000)
        wait_text(page, "#ingest-summary", r"Ingesting: [1-9]", 240)
        page.click("#ingest-stop")
        summary = wait_text(page, "#ingest-summary", r"⏹ Stopped:", 240)
        not_done = int(re.search(r"(\d+) not done", summary).group(1))
        assert 0 < not_done < len(notes), summary
        assert "not done" in page.locator("#ingest-table").inner_text()  # (a long table shows its first rows)
        page.locator("#ingest-resume").wait_for(state="visible")
        page.click("#ingest-resume")
        summary = wait_text(page, "#ingest-summary", r"✅ Done", 300)
        assert summary.startswith(f"✅ Done: {not_done} added"), summary
        assert not page.locator("#ingest-resume").is_visible() and not page.locator("#ingest-stop").is_visible()

        # 4. Speedup (RASD): stats with accepted tokens per step and the speedup estimate
        note = pick_mode(page, "Speedup (RASD)")
        assert note.startswith("Mode Speedup (RASD) is ready"), note
        text = ask(page, "How wide is the Zephyr primary mirror?", r"⚡ Speedup \(RASD\)")[-1]
        line = [ln for ln in text.splitlines() if ln.startswith("⚡ Speedup")][-1]
        assert "tok/s" in line and "accepted tokens/step" in line and "vs plain" in line, line
        page.locator("#stats-plot").wait_for(state="visible", timeout=30_000)  # accepted tokens per step
        time.sleep(1.0)
        ticks = page.locator("#stats-plot").inner_text().split("step")[0].split()
        assert ticks and ticks[0] == "1" and all(t.isdigit() and int(t) >= 1 for t in ticks), ticks  # x from 1

        # 5. Grounded (Speculative RAG): drafts with scores, on demand; the rationale is shown there only
        note = pick_mode(page, "Grounded (Speculative RAG)")
        assert note.startswith("Mode Grounded (Speculative RAG) is ready"), note
        text = ask(page, "Where was the Zephyr telescope assembled?", r"⚡ Grounded", 300)[-1]
        assert "Rationale:" not in text.rsplit(SUPPORTED, 1)[1], text
        bot.get_by_text(re.compile(r"🧪 Drafts \(\d+\)")).last.click()
        drafts = wait_text(page, "#chatbot", r"score[\s\S]*reflection", 20)
        assert "answer model, all chunks · log p" in drafts and "drafter · log p" in drafts
        offset_errors = [e for e in console if "offsetWidth" in e]
        assert not offset_errors, offset_errors
        browser.close()

    # the same process serves the OpenAI-compatible API beside the page
    with urllib.request.urlopen(app.url + "v1/models", timeout=30) as r:
        assert json.load(r)["data"][0]["id"] == SMALL_MODEL

    # 6. restart the app on the same folders: the chat is in the history sidebar, checked as it was
    app.stop()
    app.start()
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1600, "height": 1000})
        page.goto(app.url)
        history = page.locator("#history")
        history.get_by_text(SUPPORTED).first.wait_for(timeout=60_000)
        history.get_by_text(SUPPORTED).first.click()
        text = wait_text(page, "#chatbot", re.escape(UNANSWERABLE) + r"[\s\S]*⚡ Plain", 30)
        assert answer.splitlines()[0][:20] in text and "Your documents do not support this answer" in text
        assert page.locator("#chatbot span.lr-unsupported").count() >= 1 and re.search(r"Quillfield[^\n]*\[1\]", text)
        assert "garden.txt" in page.locator("#doc-list").inner_text()  # the index survived too
        browser.close()


# what an answer lists of what it searched: cited sources, or the chunks searched but not cited
SOURCES = re.compile(r"📚 Sources|🔎 Also searched")
COUNT = "Write the numbers from 1 to 500 in order, separated by commas: 1, 2, 3,"


def set_max_tokens(page, n: int) -> None:
    page.get_by_role("tab", name=re.compile("Mode & model")).click()
    box = page.locator("#max-tokens input[type=number]")
    box.click()
    box.press("Control+a")
    box.type(str(n))
    box.press("Tab")
    time.sleep(0.5)
    assert page.locator("#max-tokens input[type=number]").input_value() == str(n)


def wait_writing(page, question: str, timeout_s: float = 120) -> None:
    """Until the answer to ``question`` (COUNT) is being written: numbers written, no stats line yet.
    Any 30 characters were not enough: the pending answer's "⏳ Reading your documents: ..." status
    is as long, and a Stop then came before the first token (0 tokens, seen in the suite)."""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        answer = page.locator("#chatbot").inner_text().split(question)[-1]
        assert "⚡" not in answer, f"the answer ended before the test could act on it:\n{answer[-500:]}"
        if "⏳" not in answer and re.search(r"\d+\s*,\s*\d+\s*,\s*\d+", answer):
            return
        time.sleep(0.1)
    raise AssertionError(f"no answer to {question!r} within {timeout_s} s")


def test_two_tabs_stop_is_per_tab_and_uploads_leave_no_copy_behind(small_app, tmp_path):
    """Tab A writes a long answer; tab B asks meanwhile and shows its place in line; Stop in B
    stops B only and A writes to the end. Stop while writing keeps the text, sources and stats.
    An uploaded file leaves no copy outside the app's data dir once ingested."""
    from playwright.sync_api import sync_playwright

    app = small_app
    unique = f"zephyr-{uuid.uuid4().hex[:12]}.md"
    (tmp_path / unique).write_text(ZEPHYR)
    app.start()
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        context = browser.new_context(viewport={"width": 1400, "height": 1000})
        a, b = context.new_page(), context.new_page()
        for page in (a, b):
            page.set_default_timeout(60_000)
            page.goto(app.url)
            page.wait_for_selector("#upload-files")

        # an upload: staged under the data dir, and Gradio's temp copy removed once ingested
        a.set_input_files("#upload-files input[type=file]", str(tmp_path / unique))
        assert "1 added" in wait_text(a, "#ingest-summary", r"Done", 240)
        data = tmp_path / "data"
        assert (data / "uploads" / "default" / unique).is_file()
        system_gradio = Path(tempfile.gettempdir()) / "gradio"
        left = [p for root in (data / "tmp", system_gradio) if root.exists() for p in root.rglob(unique)]
        assert not left, f"uploaded copies left behind: {left}"
        assert loose_files(data) == []  # nor the empty file Gradio's File makes for each

        # A asks for a long answer; B asks while A writes, and waits in line
        set_max_tokens(a, 512)
        a.fill("#question textarea", COUNT)
        a.click("#send")
        wait_writing(a, COUNT)
        b.fill("#question textarea", "Who polished the mirror?")
        b.click("#send")
        wait_text(b, "#chatbot", r"waiting: 2nd in line", 60)
        b.click("#stop")
        wait_text(b, "#chatbot", r"Stopped before it started\.", 60)
        assert "⚡" not in b.locator("#chatbot").inner_text()
        a_text = wait_text(a, "#chatbot", r"⚡ Plain", 600)  # A wrote to the end
        assert "Stopped" not in a_text and SOURCES.search(a_text) and re.search(r"\b512 tokens\b", a_text), a_text

        # Stop while writing: the answer keeps its text, its sources and its stats line
        set_max_tokens(b, 512)
        b.fill("#question textarea", COUNT)
        b.click("#send")
        wait_writing(b, COUNT)
        b.click("#stop")
        b_text = wait_text(b, "#chatbot", re.escape(COUNT) + r"[\s\S]*Stopped\.[\s\S]*⚡ Plain", 60)
        tail = b_text.split(COUNT)[-1]
        assert SOURCES.search(tail) and "tok/s" in tail, tail
        tokens = int(re.search(r"writing: (\d+) tokens", tail).group(1))
        assert 0 < tokens < 512, tail
        browser.close()
