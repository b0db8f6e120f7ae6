"""The source viewer: a citation opened at its place in its document.

A PDF citation opens its page, rendered to PNG with the supporting passage highlighted (the span
the evidence found, else the whole chunk), with the previous and next pages a click away; an HTML
or Markdown citation opens at its heading (the heading path, then the chunk with its supporting
span marked); source code at its lines (the file's own lines, numbered, the span marked); any other
text as its chunk with its lines.

    sources = SourceController(services)
    view = sources.open(chat_id, "lr-ref-s-0-1")     # the chat's first answer, its source [1]
    view.head, view.body, view.page, view.next_page
    view = sources.page(view.key, view.next_page)    # the next page of the same PDF

What the browser sends is only a reference (``render.open_ref``: which answer of the chat, which of
its citations). The citation is read from the stored chat, its chunk looked up in the index by its
id (``rag.pages.cited_chunk``), and its file shown only while it is a document of that collection:
nothing here opens a path a browser names, so no route serves files outside the app's own data.
The page image goes inline (a data: URI), never through a file route.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from pathlib import Path

from localrag.app.services import DEFAULT_COLLECTION, Services
from localrag.rag.pages import Box, PageError, cited_chunk, render_page
from localrag.rag.parse import CODE_EXT, SNIFF_BYTES, sniff_encoding
from localrag.rag.records import clean_heading
from localrag.results import Citation
from localrag.ui.render import (
    code_html,
    highlighted_html,
    numbered_code,
    page_html,
    shown_label,
    spans_in,
)

REF = re.compile(r"^lr-ref-(s|a)-(\d{1,6})-(\d{1,4})$")  # render.open_ref's class, nothing else
PAGE_SCALE = 2.0  # pixels per PDF point: 144 dpi, an A4 page 1,190 pixels wide (sharp up to 150 % zoom)
MAX_CODE_LINES = 2000  # a code chunk's lines read from its file at most (a chunk holds far fewer)


@dataclass(frozen=True)
class SourceKey:
    """Which citation is open: the chat, the list ('s' the answer's sources, 'a' also searched), the
    turn's place in the chat and the citation's number (1-based)."""

    chat_id: int
    kind: str
    turn: int
    number: int


@dataclass
class SourceView:
    """What the viewer shows: ``head`` (Markdown: the source and where in it), ``body`` (HTML: the
    page image or the chunk), and for a PDF the page shown, its neighbours (None: none) and the
    highlighted rectangles (PDF points)."""

    head: str
    body: str = ""
    key: SourceKey | None = None
    page: int | None = None
    prev_page: int | None = None
    next_page: int | None = None
    boxes: tuple[Box, ...] = ()


def _error(text: str, key: SourceKey | None = None) -> SourceView:
    return SourceView(f"❌ {text}", "", key)


class SourceController:
    def __init__(self, services: Services) -> None:
        self.s = services

    def open(self, chat_id: int | None, ref: str) -> SourceView:
        """Open the citation ``ref`` (``render.open_ref``) of chat ``chat_id``."""
        m = REF.match((ref or "").strip())
        if chat_id is None or m is None:
            return _error("That source is not part of this chat.")
        return self.show(SourceKey(int(chat_id), m.group(1), int(m.group(2)), int(m.group(3))))

    def page(self, key: SourceKey | None, page: int | None) -> SourceView:
        """Another page of the open PDF citation."""
        if key is None or page is None:
            return _error("Open a PDF citation first.")
        return self.show(key, int(page))

    def show(self, key: SourceKey, page: int | None = None) -> SourceView:
        turns = self.s.history.turns(key.chat_id)
        if not 0 <= key.turn < len(turns):
            return _error("That answer is no longer in this chat.", key)
        turn = turns[key.turn]
        cites = turn.citations if key.kind == "s" else turn.also_searched
        if not 1 <= key.number <= len(cites):
            return _error("That answer has no such source.", key)
        c = cites[key.number - 1]
        collection = turn.collection or DEFAULT_COLLECTION
        try:
            index = self.s.index(collection)
            hit = cited_chunk(index, c.chunk_id)
            documents = {d.path for d in index.list_documents() if d.status != "failed"}
        except Exception as exc:  # an index that cannot be read says so in the viewer
            return _error(f"The collection “{collection}” cannot be read: {exc}", key)
        # the file as the index records it: the chunk's version, else the one the answer cited
        path = hit.file if hit is not None else c.file
        if path not in documents:
            return _error(f"{Path(path).name} is no longer in the collection “{collection}”: there is nothing "
                          "to open.", key)
        spans = spans_in(turn.evidence, c.chunk_id) if key.kind == "s" else []
        label = shown_label(c.label)
        title = f"**[{key.number}] {label}**" if key.kind == "s" else f"**{label}** (searched, not cited)"
        changed = "" if hit is not None else "  \nℹ️ *The document was indexed again since this answer: shown from " \
                                             "the current file, the cited text may have moved.*"
        cited_page = hit.page if hit is not None else c.page
        if cited_page is not None:
            return self._pdf(key, path, c, spans, cited_page, page or cited_page, title, changed)
        return self._text(key, path, c, spans, hit.heading_path if hit is not None else (), title, changed)

    def _pdf(self, key: SourceKey, path: str, c: Citation, spans: list[tuple[int, int]], cited: int, shown: int,
             title: str, changed: str) -> SourceView:
        name = Path(path).name
        # the supporting span (offsets into the chunk as the answer saw it), else the whole chunk
        passage = c.text[min(a for a, _ in spans):max(b for _, b in spans)] if spans else c.text
        try:
            if shown != cited:
                image = render_page(path, shown, scale=PAGE_SCALE)
            else:
                image = render_page(path, shown, passage=passage, scale=PAGE_SCALE)
                if not image.boxes and spans:  # the span alone not found (spacing, OCR): the chunk then
                    image = render_page(path, shown, passage=c.text, scale=PAGE_SCALE)
        except PageError as exc:
            return _error(f"{name}: {exc}", key)
        where = f"📄 **{name}** · page {shown} of {image.n_pages}"
        if shown != cited:
            where += f" · the cited passage is on page {cited}"
        elif image.boxes:
            where += " · the cited passage is highlighted" if not spans else " · the supporting passage is highlighted"
        elif image.note:
            where += f" · {image.note}"
        width_pt, height_pt = image.width / image.scale, image.height / image.scale
        first = min(image.boxes, key=lambda b: (-b.top, b.left), default=None)  # the passage's first line
        focus = None if first is None else (max(0.0, first.left / width_pt), max(0.0, 1 - first.top / height_pt))
        body = page_html(image.png, f"{name}, page {shown}", width_pt, height_pt, focus)
        return SourceView(f"{title}  \n{where}{changed}", body, key, shown, image.prev_page, image.next_page,
                          image.boxes)

    def _text(self, key: SourceKey, path: str, c: Citation, spans: list[tuple[int, int]],
              heading_path: tuple[str, ...], title: str, changed: str) -> SourceView:
        name = Path(path).name
        lines = ""
        if c.line_start is not None:
            same = c.line_end is None or c.line_end == c.line_start
            unit = "¶" if name.lower().endswith(".docx") else ("line " if same else "lines ")
            lines = f"{unit}{c.line_start}" + ("" if same else f"-{c.line_end}")
        headings = [clean_heading(h) for h in heading_path]
        where = f"📑 **{name}**" + (f" § {' › '.join(headings)}" if headings else "") + (
            f" · {lines}" if lines else "")
        body = ""
        if Path(path).suffix.lower() in CODE_EXT and c.line_start is not None:
            rows = numbered_code(c.text, spans, c.line_start, _file_lines(path, c.line_start, c.line_end))
            if rows:
                body = code_html(rows)
            else:
                where += " · *the file changed since it was indexed: the chunk as indexed*"
        return SourceView(f"{title}  \n{where}{changed}", body or highlighted_html(c.text, spans), key)


def _file_lines(path: str, start: int, end: int | None) -> list[str]:
    """Lines ``start``..``end`` (1-based, inclusive; at most MAX_CODE_LINES) of an indexed text file,
    read as the parser reads it; [] when it cannot be read."""
    stop = start - 1 + min(MAX_CODE_LINES, (end or start) - start + 1)
    try:
        with open(path, "rb") as fh:
            encoding = sniff_encoding(fh.read(SNIFF_BYTES))
        with open(path, encoding=encoding, errors="replace", newline=None) as fh:
            return [ln.rstrip("\n") for ln in itertools.islice(fh, start - 1, stop)]
    except OSError:
        return []
