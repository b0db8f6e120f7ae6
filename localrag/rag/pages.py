"""A PDF citation opened at its page: the page rendered to PNG with the cited passage highlighted.

    found = find_passage("report.pdf", 3, hit.text)           # where the chunk's words lie on page 3
    found.boxes                                                # (Box(left, bottom, right, top), ...) in PDF points
    image = render_page("report.pdf", 3, passage=hit.text, scale=1.5)
    image.png, image.n_pages, image.prev_page, image.next_page, image.note

Pages are 1-based, as the index's chunk metadata stores them (``Hit.page``). The chunk text comes
from pypdf and the page text here from PDFium: the two differ in spacing, line breaks, hyphenation
at line ends and ligatures. So both are reduced to one *key*: their letters and digits, NFKD
normalised and casefolded, everything else dropped, each key character mapped back to the PDFium
character it came from. The passage's key is looked up in the page's key (exactly, else as the
longest runs of it that lie close together and cover most of it), and the PDFium characters of
that span give the boxes: PDFium's own text rectangles for a character range, one per line
segment. A passage that is not on the page is no error: the page is rendered without highlight
and ``note`` says so. What is not a PDF, or a page out of range, raises :class:`PageError`.

What a citation opens is looked up in the index, never taken from a client: ``cited_chunk(index,
chunk_id)`` is the live chunk with its anchors (page, lines, heading path) and its file as the
manifest records it, or None once that version is gone (the file was removed or re-ingested).
"""

from __future__ import annotations

import ctypes
import difflib
import io
import json
import os
import unicodedata
from dataclasses import dataclass

import pypdfium2
import pypdfium2.raw as pdfium_c
from PIL import Image, ImageDraw

from localrag.rag.index import DocumentIndex
from localrag.rag.records import Hit

__all__ = ["Box", "PageError", "PageImage", "PassageMatch", "cited_chunk", "find_passage", "page_count",
           "render_page"]

HIGHLIGHT = (255, 214, 0, 96)  # translucent yellow over the passage's text rectangles
MIN_RUN = 4  # shortest run of key characters the fuzzy match counts (shorter ones match by chance)
MIN_COVER = 0.8  # share of the passage's key the fuzzy match must find on the page
MAX_SPREAD = 1.5  # the runs found may span at most this multiple of the passage's key on the page
MAX_SCALE = 8.0  # 576 dpi: a bigger bitmap of one page only costs memory


class PageError(ValueError):
    """The file cannot be shown as a PDF page (not a PDF, unreadable, page out of range); one line."""


@dataclass(frozen=True)
class Box:
    """A rectangle in PDF user space (points, origin bottom-left, as PDFium reports them)."""

    left: float
    bottom: float
    right: float
    top: float

    def contains(self, x: float, y: float, tol: float = 0.0) -> bool:
        return self.left - tol <= x <= self.right + tol and self.bottom - tol <= y <= self.top + tol


@dataclass(frozen=True)
class PassageMatch:
    """Where a passage lies on a page. ``chars``: PDFium character indexes [start, end) of the span
    (None when not found); ``exact``: the whole key matched in one piece (else the fuzzy match);
    ``note``: why nothing was found ('' when found)."""

    page: int
    boxes: tuple[Box, ...] = ()
    chars: tuple[int, int] | None = None
    exact: bool = False
    note: str = ""

    @property
    def found(self) -> bool:
        return self.chars is not None


@dataclass(frozen=True)
class PageImage:
    """One rendered page. ``width``/``height`` in pixels; ``boxes`` the highlighted rectangles in
    PDF points (empty when no passage was asked for or found; ``note`` then says which)."""

    png: bytes
    page: int
    n_pages: int
    width: int
    height: int
    scale: float
    boxes: tuple[Box, ...] = ()
    note: str = ""

    @property
    def prev_page(self) -> int | None:
        return self.page - 1 if self.page > 1 else None

    @property
    def next_page(self) -> int | None:
        return self.page + 1 if self.page < self.n_pages else None


def page_count(path: str | os.PathLike) -> int:
    """How many pages the PDF has; PageError when it is not one."""
    pdf = _open(path)
    try:
        return len(pdf)
    finally:
        pdf.close()


def find_passage(path: str | os.PathLike, page: int, passage: str) -> PassageMatch:
    """The boxes of ``passage`` (a chunk's text, or a span of it) on 1-based ``page``."""
    pdf = _open(path)
    try:
        pg = _page(pdf, page, path)
        try:
            return _match(pg, page, passage)
        finally:
            pg.close()
    finally:
        pdf.close()


def render_page(path: str | os.PathLike, page: int, passage: str | None = None, scale: float = 1.5) -> PageImage:
    """PNG of 1-based ``page`` at ``scale`` pixels per point (1.0 = 72 dpi), with ``passage``
    highlighted when given and found."""
    if not 0 < scale <= MAX_SCALE:
        raise PageError(f"scale must be in (0, {MAX_SCALE:g}], got {scale:g}")
    pdf = _open(path)
    try:
        pg = _page(pdf, page, path)
        try:
            match = _match(pg, page, passage) if passage is not None else PassageMatch(page)
            image = pg.render(scale=scale).to_pil().convert("RGB")
            if match.boxes:
                image = _highlight(image, pg, match.boxes)
        finally:
            pg.close()
        buf = io.BytesIO()
        image.save(buf, format="PNG")
        return PageImage(buf.getvalue(), page, len(pdf), image.width, image.height, scale, match.boxes, match.note)
    finally:
        pdf.close()


def cited_chunk(index: DocumentIndex, chunk_id: str) -> Hit | None:
    """The live chunk ``chunk_id`` of ``index`` (scores None, fused 0), its file the manifest's path
    of its version; None when that version is no longer live."""
    live = index.manifest.live_versions(index.config.collection, index.space)
    ver = chunk_id.split(":", 1)[0]
    if ver not in live:
        return None
    with index.store.session():
        col = index.store.collection(index.space, create=False)
        got = col.get(ids=[chunk_id], include=["documents", "metadatas"]) if col is not None else None
    if not got or not got["ids"] or got["metadatas"][0] is None:
        return None
    doc, meta = got["documents"][0], got["metadatas"][0]
    return Hit(chunk_id=chunk_id, text=doc, file=live[ver], page=meta.get("page"), line_start=meta.get("line_start"),
               line_end=meta.get("line_end"), heading_path=tuple(json.loads(meta.get("heading_path", "[]"))),
               dense_score=None, bm25_score=None, fused_score=0.0, ocr=bool(meta.get("ocr", False)))


# ---------------------------------------------------------------- opening


def _open(path: str | os.PathLike) -> pypdfium2.PdfDocument:
    name = os.path.basename(os.fspath(path))
    try:
        with open(path, "rb") as fh:
            head = fh.read(1024)
    except OSError as exc:
        raise PageError(f"cannot open {name}: {exc.strerror or exc}") from exc
    if b"%PDF-" not in head:
        raise PageError(f"{name} is not a PDF (no %PDF- header)")
    try:
        return pypdfium2.PdfDocument(os.fspath(path))
    except pypdfium2.PdfiumError as exc:
        raise PageError(f"{name} cannot be opened as a PDF: {exc}") from exc


def _page(pdf: pypdfium2.PdfDocument, page: int, path: str | os.PathLike) -> pypdfium2.PdfPage:
    n = len(pdf)
    if not 1 <= page <= n:
        raise PageError(f"{os.path.basename(os.fspath(path))} has {n} page(s): there is no page {page}")
    return pdf[page - 1]


# ---------------------------------------------------------------- matching


def _key(text: str) -> tuple[str, list[int]]:
    """Letters and digits of ``text``, NFKD-normalised and casefolded, with the index in ``text``
    of the character each key character came from (a ligature gives several)."""
    out: list[str] = []
    origin: list[int] = []
    for i, ch in enumerate(text):
        for c in unicodedata.normalize("NFKD", ch).casefold():
            if c.isalnum():
                out.append(c)
                origin.append(i)
    return "".join(out), origin


def _page_chars(textpage: pypdfium2.PdfTextPage) -> str:
    """The page's characters, one per PDFium character index (so key positions map to indexes)."""
    n = textpage.count_chars()
    return "".join(chr(pdfium_c.FPDFText_GetUnicode(textpage, i) or 0xFFFD) for i in range(n))


def _match(pg: pypdfium2.PdfPage, page: int, passage: str) -> PassageMatch:
    want, _ = _key(passage)
    if not want:
        return PassageMatch(page, note="the passage has no letters or digits to look for")
    textpage = pg.get_textpage()
    try:
        have, origin = _key(_page_chars(textpage))
        if not have:
            return PassageMatch(page, note=f"page {page} has no text layer (a scan?): shown without highlight")
        at = have.find(want)
        if at >= 0:
            span, exact = (at, at + len(want)), True
        else:
            span, exact = _fuzzy(have, want), False
        if span is None:
            return PassageMatch(page, note=f"the passage was not found on page {page}: shown without highlight")
        first, last = origin[span[0]], origin[span[1] - 1]
        chars = (first, last + 1)
        return PassageMatch(page, _rects(textpage, first, last + 1 - first), chars, exact)
    finally:
        textpage.close()


def _fuzzy(have: str, want: str) -> tuple[int, int] | None:
    """The span of ``have`` holding most of ``want``: the runs of at least MIN_RUN characters that
    difflib matches, if they cover MIN_COVER of ``want`` and lie within MAX_SPREAD of its length."""
    runs = [b for b in difflib.SequenceMatcher(None, have, want, autojunk=False).get_matching_blocks()
            if b.size >= MIN_RUN]
    if not runs or sum(b.size for b in runs) < MIN_COVER * len(want):
        return None
    start, end = runs[0].a, runs[-1].a + runs[-1].size  # the blocks come in order of both strings
    return (start, end) if end - start <= MAX_SPREAD * len(want) else None


def _rects(textpage: pypdfium2.PdfTextPage, index: int, count: int) -> tuple[Box, ...]:
    """PDFium's text rectangles of a character range: one per line segment it covers."""
    n = textpage.count_rects(index, count)
    return tuple(Box(*textpage.get_rect(i)) for i in range(n))


# ---------------------------------------------------------------- drawing


def _highlight(image: Image.Image, pg: pypdfium2.PdfPage, boxes: tuple[Box, ...]) -> Image.Image:
    """The image with translucent rectangles over ``boxes`` (PDF points mapped to pixels by PDFium,
    so crop box origin and page rotation are accounted for)."""
    overlay = Image.new("RGBA", image.size, (0, 0, 0, 0))
    draw = ImageDraw.Draw(overlay)
    for box in boxes:
        x0, y0 = _to_pixel(pg, image.size, box.left, box.top)
        x1, y1 = _to_pixel(pg, image.size, box.right, box.bottom)
        draw.rectangle((min(x0, x1), min(y0, y1), max(x0, x1), max(y0, y1)), fill=HIGHLIGHT)
    return Image.alpha_composite(image.convert("RGBA"), overlay).convert("RGB")


def _to_pixel(pg: pypdfium2.PdfPage, size: tuple[int, int], x: float, y: float) -> tuple[int, int]:
    dx, dy = ctypes.c_int(), ctypes.c_int()
    # FPDF_PageToDevice maps page space to a device rectangle of the rendered size, rotation 0:
    # render() applies the page's own /Rotate, and so does this call
    pdfium_c.FPDF_PageToDevice(pg, 0, 0, size[0], size[1], 0, x, y, ctypes.byref(dx), ctypes.byref(dy))
    return dx.value, dy.value
