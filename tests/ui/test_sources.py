"""Citations that open their source, on the real index (Chroma + the ONNX MiniLM in a temp folder; the
answer model is a fake, the chats are written as the app writes them): a PDF at its page with the
supporting span highlighted and the neighbouring pages a click away, Markdown and HTML at their
heading, code at its lines, and nothing opened that the collection does not index.

Run: HF_HUB_OFFLINE=1 .venv/bin/python -m pytest tests/ui/test_sources.py -q
"""

from __future__ import annotations

import base64
import io
import re
from pathlib import Path

import pytest
from PIL import Image

from localrag.app.config import AppConfig
from localrag.app.history import Turn
from localrag.app.services import Services
from localrag.evidence import EvidenceAligner
from localrag.rag.config import IndexConfig
from localrag.rag.pages import find_passage
from localrag.results import Citation
from localrag.ui.documents import DocsController
from localrag.ui.render import chat_messages
from localrag.ui.sources import SourceController
from tests.ui.conftest import FAKE_MODES, REPORT_PAGES, FakeEngine, make_pdf

GUIDE = """# Setup

The tool needs Python 3.11.

## Linux

On Linux, install the package with the system's package manager, then run the setup script once.
The setup script writes its configuration to the home folder.

## macOS

On macOS, use Homebrew.
"""
PAGE_HTML = """<html><body><h1>Falcon guide<a class="headerlink" href="#g">¶</a></h1><p>Falcons nest on cliffs.</p>
<h2>Feeding</h2><p>The peregrine falcon feeds mostly on pigeons caught in flight.</p></body></html>
"""
TOOL = '''import sys


def exit_status(problems):
    """The exit status for what went wrong."""
    if not problems:
        return 0

    if all(p.minor for p in problems):
        return 1
    return 2
'''


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    """Services over a real index holding one PDF, one Markdown, one HTML and one code file."""
    tmp = tmp_path_factory.mktemp("sources")
    src = tmp / "browser"
    src.mkdir()
    make_pdf(src / "report.pdf", REPORT_PAGES)
    (src / "guide.md").write_text(GUIDE)
    (src / "falcons.html").write_text(PAGE_HTML)
    (src / "status.py").write_text(TOOL)
    s = Services(AppConfig(data_dir=tmp / "data", index=IndexConfig(index_dir=tmp / "index")), engine=FakeEngine(),
                 modes=FAKE_MODES)
    final = list(DocsController(s).ingest(sorted(str(p) for p in src.iterdir()), "default"))[-1]
    assert "4 added" in final.summary, final.summary
    yield s
    s.close()


def hit_in(s: Services, query: str, name: str):
    return next(h for h in s.index("default").search(query, k=8) if Path(h.file).name == name)


def asked(s: Services, answer: str, hits, question: str = "q") -> int:
    """A chat whose one answer cites ``hits``, checked as the modes check it; returns its id."""
    evidence = EvidenceAligner().align(answer, hits, question=question)
    turn = Turn(question=question, answer=answer, citations=[Citation.from_hit(h) for h in hits],
                evidence=evidence, collection="default", supported=evidence.supported)
    chat = s.history.new_chat(question)
    s.history.add_turn(chat, turn)
    return chat


def test_a_pdf_citation_opens_its_page_with_the_supporting_span_highlighted(app):
    hit = hit_in(app, "How far did the glacier retreat?", "report.pdf")
    assert hit.page == 2
    answer = "The ice retreated by forty-one metres over the season."
    chat = asked(app, answer, [hit], "How far did the glacier retreat?")
    link = re.search(r'class="lr-open (lr-ref-s-0-1)"', chat_messages(app.history.turns(chat))[1]["content"])
    assert link, "the [1] marker is a link to the source"
    view = SourceController(app).open(chat, link.group(1))
    assert view.page == 2 and (view.prev_page, view.next_page) == (1, 3)
    assert "[1] report.pdf p.2" in view.head and "page 2 of 3" in view.head and "highlighted" in view.head
    png = base64.b64decode(re.search(r'src="data:image/png;base64,([^"]+)"', view.body).group(1))
    assert Image.open(io.BytesIO(png)).size[0] > 1100  # the page itself, at 2 pixels per point (sharp when zoomed)
    # the view scrolls to the passage: its first line's top-left corner as fractions of the page
    view_at = re.search(r'data-width-pt="([\d.]+)" data-height-pt="([\d.]+)" data-focus-x="([\d.]+)" '
                        r'data-focus-y="([\d.]+)"', view.body)
    assert view_at, view.body[:500]
    width_pt, height_pt, fx, fy = map(float, view_at.groups())
    top = max(b.top for b in view.boxes)
    assert abs(width_pt - 595.3) < 1 and abs(height_pt - 841.9) < 1  # A4, in points (whole pixels)
    assert abs(fy - (1 - top / height_pt)) < 1e-3 and 0.05 < fy < 0.5 and 0 < fx < 0.2
    assert 'data-zoom="in"' in view.body and 'data-zoom="out"' in view.body and 'data-zoom="fit"' in view.body
    # the highlight is the supporting span, not the whole chunk: the span's own boxes on page 2
    span = find_passage(Path(hit.file), 2, "The ice retreated by forty-one metres over the season")
    assert view.boxes and span.found and set(view.boxes) == set(span.boxes)
    assert set(view.boxes) != set(find_passage(Path(hit.file), 2, hit.text).boxes)
    nxt = SourceController(app).page(view.key, view.next_page)
    assert nxt.page == 3 and nxt.boxes == () and "the cited passage is on page 2" in nxt.head
    assert "data-focus-y" not in nxt.body  # no passage on it: the page from its top
    assert nxt.next_page is None and SourceController(app).page(nxt.key, nxt.prev_page).boxes == view.boxes


def test_markdown_and_html_open_at_their_heading_code_at_its_numbered_lines(app):
    md = hit_in(app, "How do I install on Linux?", "guide.md")
    html_hit = hit_in(app, "What do peregrine falcons eat?", "falcons.html")
    code = hit_in(app, "exit status for minor problems", "status.py")
    chat = asked(app, "On Linux, install the package with the system's package manager. "
                      "The peregrine falcon feeds mostly on pigeons caught in flight.", [md, html_hit, code])
    sources = SourceController(app)
    view = sources.open(chat, "lr-ref-s-0-1")
    assert "📑 **guide.md** § Setup › Linux" in view.head and view.page is None
    assert "<mark>On Linux, install the package with the system&#x27;s package manager" in view.body
    view = sources.open(chat, "lr-ref-s-0-2")
    assert "📑 **falcons.html** § Falcon guide › Feeding" in view.head and "¶" not in view.head  # its permalink dropped
    assert view.page is None and "lr-page-view" not in view.body  # not paged: no page buttons (layout), no zoom
    assert "<mark>The peregrine falcon feeds mostly on pigeons caught in flight" in view.body
    view = sources.open(chat, "lr-ref-s-0-3")
    assert "status.py" in view.head and f"lines {code.line_start}-{code.line_end}" in view.head
    numbered = re.findall(r'<span class="lr-ln">(\d+)</span>([^\n]*)', view.body)
    file_lines = TOOL.splitlines()
    assert numbered and [int(n) for n, _ in numbered] == list(range(code.line_start, code.line_start + len(numbered)))
    for n, body in numbered:  # each number on its own line of the file, blank lines included
        assert re.sub(r"<[^>]+>", "", body).replace("&quot;", '"') == file_lines[int(n) - 1]


def test_a_heading_indexed_with_its_permalink_mark_is_shown_without_it(app):
    """A chat stored before the parser dropped the "¶" (its label "§ 3.6. Module Path¶") shows the
    heading without it, in the answer's sources and in the viewer."""
    html_hit = hit_in(app, "What do peregrine falcons eat?", "falcons.html")
    old = Citation.from_hit(html_hit)
    old = Citation(**{**old.to_dict(), "label": "falcons.html § 3.6. Module Path¶"})
    chat = app.history.new_chat("q")
    app.history.add_turn(chat, Turn(question="q", answer="Pigeons.", citations=[old], collection="default"))
    shown = chat_messages(app.history.turns(chat))
    assert any(m.get("metadata", {}).get("title", "").startswith("[1] falcons.html § 3.6. Module Path · ")
               for m in shown)
    assert "¶" not in "".join(m["content"] + m.get("metadata", {}).get("title", "") for m in shown)
    assert SourceController(app).open(chat, "lr-ref-s-0-1").head.startswith("**[1] falcons.html § 3.6. Module Path**")


def test_nothing_is_opened_that_the_collection_does_not_index(app, tmp_path):
    """The browser names a citation, never a file; a citation whose file is not (or no longer) a
    document of its collection opens nothing, whatever its stored path says."""
    outside = tmp_path / "secret.pdf"
    make_pdf(outside, [["Not indexed: a secret page."]])
    hit = hit_in(app, "lantern inventory", "report.pdf")
    forged = Citation(file=str(outside), page=1, line_start=1, line_end=1, snippet="secret", text="a secret page",
                      chunk_id="nosuchver:0", label="secret.pdf p.1")
    chat = app.history.new_chat("q")
    app.history.add_turn(chat, Turn(question="q", answer="x", citations=[forged, Citation.from_hit(hit)],
                                    collection="default"))
    sources = SourceController(app)
    view = sources.open(chat, "lr-ref-s-0-1")
    assert view.head.startswith("❌ secret.pdf is no longer in the collection") and view.body == ""
    assert sources.open(chat, "lr-ref-s-0-2").page == 3  # the same chat's real citation opens
    for ref in ("lr-ref-s-0-9", "lr-ref-s-5-1", "../../etc/passwd", "lr-ref-x-0-1", ""):
        assert sources.open(chat, ref).head.startswith("❌") and sources.open(chat, ref).body == ""
    assert sources.open(None, "lr-ref-s-0-2").head.startswith("❌")
