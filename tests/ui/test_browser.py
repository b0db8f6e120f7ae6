"""End to end in a real headless Chromium: upload, ingest, ask, cite, switch modes, restart.

Starts ``python app.py`` on a free port with its own data and index folders,
drives the page with Playwright (Debian's /usr/bin/chromium; Playwright's own
browser download is not used), and saves the README screenshot of an answer
with its citation opened to ``docs/screenshot.png`` when LOCALRAG_UPDATE_SCREENSHOT=1.

    HF_HUB_OFFLINE=1 .venv/bin/python -m pytest tests/ui/test_browser.py -q
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = os.environ.get("LOCALRAG_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
SCREENSHOT = ROOT / "docs" / "screenshot.png"

ZEPHYR = """# Project Zephyr

The Zephyr telescope was assembled in the town of Quillfield in 2019.
Its primary mirror is 4.2 metres wide and was polished by Marta Ilves.
The telescope observes the sky from the Quillfield ridge every clear night.
"""
GARDEN = """Notes on the community garden.

The community garden grows tomatoes, beans and sunflowers.
Watering happens every Tuesday and Saturday morning.
The compost bins are emptied on the first day of each month.
"""
QUESTION = "Who polished the mirror of the Zephyr telescope?"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class App:
    """``python app.py`` as a subprocess on its own port and folders."""

    def __init__(self, tmp: Path) -> None:
        self.tmp, self.port, self.proc = tmp, free_port(), None
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
                 "--index-dir", str(self.tmp / "index")],
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


@pytest.fixture
def app(tmp_path):
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} not installed (scripts/setup.sh --dev installs Debian's chromium)")
    pytest.importorskip("playwright.sync_api")
    a = App(tmp_path)
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


def pick_mode(page, label: str) -> str:
    page.get_by_role("tab", name=re.compile("Mode & model")).click()
    page.locator("#mode label", has_text=label).click()
    time.sleep(0.5)
    return page.locator("#mode-note").inner_text()


def test_browser_end_to_end(app, tmp_path):
    from playwright.sync_api import sync_playwright

    docs = tmp_path / "mydocs"
    docs.mkdir()
    (docs / "zephyr.md").write_text(ZEPHYR)
    (docs / "garden.txt").write_text(GARDEN)
    (docs / "broken.pdf").write_bytes(b"%PDF-1.7\n this is not really a PDF")
    app.start()
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1600, "height": 1000})
        page.set_default_timeout(60_000)
        page.goto(app.url)
        page.wait_for_selector("#upload-files")

        # 1. upload two files through the page; wait for ingestion with per-file results
        page.set_input_files("#upload-files input[type=file]", [str(docs / "zephyr.md"), str(docs / "garden.txt")])
        summary = wait_text(page, "#ingest-summary", r"Done", 240)
        assert "2 added" in summary and "0 failed" in summary, summary
        listed = wait_text(page, "#doc-list", r"zephyr\.md[\s\S]*|garden\.txt", 30)
        assert "zephyr.md" in listed and "garden.txt" in listed
        stored = sorted(p.name for p in (tmp_path / "data" / "uploads" / "default").iterdir())
        assert stored == ["garden.txt", "zephyr.md"]

        # 2. ask a question answered by one file: streamed answer, citation naming that file
        seen = ask(page, QUESTION, r"⚡ Plain")
        streaming = [t for t in seen if QUESTION in t and "⚡ Plain" not in t]
        assert streaming, "the page never showed the answer in progress (pending or partial)"
        final = seen[-1]
        answer = final.split(QUESTION, 1)[1].split("📚", 1)[0].strip()
        assert answer and answer != "…", final
        bot = page.locator("#chatbot")
        bot.get_by_text(re.compile(r"📚 Sources \(\d+\)")).last.click()
        first = bot.get_by_text(re.compile(r"^\[1\] ")).last
        first.wait_for()
        assert "zephyr.md" in first.inner_text(), bot.inner_text()
        first.click()  # expand the citation to its chunk text
        wait_text(page, "#chatbot", r"polished by Marta Ilves", 20)
        assert re.search(r"tok/s", final)
        time.sleep(1.0)  # let the panel's opening animation finish
        page.screenshot(path=str(tmp_path / "shot.png"))
        if os.environ.get("LOCALRAG_UPDATE_SCREENSHOT"):  # refresh the README's picture on request only
            SCREENSHOT.parent.mkdir(exist_ok=True)
            shutil.copyfile(tmp_path / "shot.png", SCREENSHOT)

        # 3. a corrupt upload fails with its reason, as a message in the page
        page.set_input_files("#upload-files input[type=file]", str(docs / "broken.pdf"))
        summary = wait_text(page, "#ingest-summary", r"Done: 0 added", 120)
        assert "1 failed" in summary, summary
        assert re.search(r"broken\.pdf\s+failed\s+0\s+\S", page.locator("#ingest-table").inner_text())

        # 4. Speedup (RASD): stats with accepted tokens per step and the speedup estimate
        note = pick_mode(page, "Speedup (RASD)")
        assert note.startswith("Mode Speedup (RASD) is ready"), note
        text = ask(page, "How wide is the Zephyr primary mirror?", r"⚡ Speedup \(RASD\)")[-1]
        line = [ln for ln in text.splitlines() if ln.startswith("⚡ Speedup")][-1]
        assert "tok/s" in line and "accepted tokens/step" in line and "vs plain" in line, line
        page.locator("#stats-plot").wait_for(state="visible", timeout=30_000)  # accepted tokens per step

        # 5. Grounded (Speculative RAG): drafts with scores, on demand
        note = pick_mode(page, "Grounded (Speculative RAG)")
        assert note.startswith("Mode Grounded (Speculative RAG) is ready"), note
        ask(page, "Where was the Zephyr telescope assembled?", r"⚡ Grounded", 300)
        bot.get_by_text(re.compile(r"🧪 Drafts \(\d+\)")).last.click()
        drafts = wait_text(page, "#chatbot", r"score[\s\S]*reflection", 20)
        assert "consistency" in drafts
        browser.close()

    # 6. restart the app on the same folders: the chat is in the history sidebar
    app.stop()
    app.start()
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1600, "height": 1000})
        page.goto(app.url)
        history = page.locator("#history")
        history.get_by_text(QUESTION).wait_for(timeout=60_000)
        history.get_by_text(QUESTION).click()
        text = wait_text(page, "#chatbot", re.escape(QUESTION) + r"[\s\S]*⚡ Plain", 30)
        assert answer.splitlines()[0][:20] in text
        assert "garden.txt" in page.locator("#doc-list").inner_text()  # the index survived too
        browser.close()
