"""Document parsers: turn one file into a stream of text units with anchors.

Every parser is a generator of :class:`Unit` (a line or paragraph with its page
or line span and heading path), so a huge plain-text file is never held in
memory. Units are bounded too: a line (or HTML block) longer than MAX_UNIT_CHARS
comes as several units cut between words, so a 30 MB single-line file streams like
any other. The libraries do the format work: pypdf (PDF; pages without a text layer are
read by OCR, see :mod:`localrag.rag.ocr`), python-docx (DOCX), the standard library's
incremental ``html.parser`` (HTML, streamed at any size), markdown-it-py (Markdown).
Anything wrong with a file is raised as :class:`ParseError` with a message meant for the user.

    from localrag.rag.parse import parse_file
    for unit in parse_file("notes.md"):
        print(unit.line_start, unit.heading_path, unit.text)
"""

from __future__ import annotations

import codecs
import errno
import itertools
import logging
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import TextIO

import docx
import pypdfium2
from docx.opc.exceptions import PackageNotFoundError
from docx.table import Table
from markdown_it import MarkdownIt
from pypdf import PdfReader
from pypdf.errors import FileNotDecryptedError, PdfReadError, PdfStreamError

from localrag.rag.ocr import OcrUnavailable, PageReader
from localrag.rag.records import clean_heading

MARKDOWN_EXT = {".md", ".markdown", ".mdown", ".mkd"}
HTML_EXT = {".html", ".htm", ".xhtml"}
TEXT_EXT = {".txt", ".text", ".rst", ".log", ".csv", ".tsv", ".org", ".tex", ".adoc"}
CODE_EXT = {
    ".py", ".pyi", ".js", ".jsx", ".ts", ".tsx", ".java", ".kt", ".scala", ".c", ".h", ".cc", ".cpp",
    ".hpp", ".cs", ".go", ".rs", ".rb", ".php", ".swift", ".m", ".sh", ".bash", ".zsh", ".ps1", ".sql",
    ".r", ".jl", ".lua", ".pl", ".hs", ".ex", ".exs", ".dart", ".vue", ".css", ".scss", ".json",
    ".yaml", ".yml", ".toml", ".ini", ".cfg", ".xml", ".proto", ".gradle", ".cmake", ".mk",
}  # fmt: skip
SUPPORTED_EXT = {".pdf", ".docx"} | MARKDOWN_EXT | HTML_EXT | TEXT_EXT | CODE_EXT
# The Markdown parser needs the whole text; above this size Markdown is read as plain text (streamed).
MAX_STRUCTURED_BYTES = 8 * 1024 * 1024
SNIFF_BYTES = 64 * 1024
# Longest unit a parser yields; a longer line is cut between words into several units.
MAX_UNIT_CHARS = 16 * 1024
READ_CHARS = 1 << 20  # characters fed to the HTML parser at a time

# pypdf reports damage it recovers from as logging warnings; what the user sees of a PDF is its
# outcome (indexed, or a ParseError with the reason), so those warnings stay off stderr.
logging.getLogger("pypdf").addHandler(logging.NullHandler())
logging.getLogger("pypdf").propagate = False


class ParseError(Exception):
    """A file that cannot be ingested; str(exc) is the per-file reason shown to the user."""


@dataclass(frozen=True)
class Unit:
    """One line (or paragraph) of a document, the atom the chunker packs.

    new_block marks the first unit of a paragraph, heading, table or code block:
    the chunker prefers to cut there. line_start/line_end are 1-based and
    inclusive (for DOCX: paragraph numbers; for PDF: lines within ``page``).
    ocr: the text was read from the page's image by OCR (a PDF page without a text layer).
    """

    text: str
    kind: str = "text"  # text | heading | code
    new_block: bool = False
    page: int | None = None
    line_start: int | None = None
    line_end: int | None = None
    heading_path: tuple[str, ...] = ()
    ocr: bool = False


def supported(path: str | os.PathLike) -> bool:
    return Path(path).suffix.lower() in SUPPORTED_EXT


def check_file(path: str | os.PathLike) -> os.stat_result:
    """Refuse what is not an ordinary, non-empty, readable file, with the reason."""
    p = Path(path)
    try:
        st = p.stat()
    except PermissionError as exc:
        raise ParseError(f"unreadable: permission denied ({exc.strerror})") from exc
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise ParseError(f"symlink loop ({p.name} -> {os.readlink(p)} never reaches a file)") from exc
        if p.is_symlink():
            raise ParseError(f"broken symlink (points to {os.readlink(p)!s}, which does not exist)") from exc
        if exc.errno == errno.ENOENT:
            raise ParseError("file not found") from exc
        raise ParseError(f"unreadable: {exc.strerror or exc}") from exc
    if stat.S_ISDIR(st.st_mode):
        raise ParseError("is a directory")
    if not stat.S_ISREG(st.st_mode):
        raise ParseError("not a regular file (device, FIFO or socket)")
    if p.suffix.lower() not in SUPPORTED_EXT:
        kind = f"'{p.suffix}'" if p.suffix else "(no extension)"
        raise ParseError(
            f"unsupported file type {kind}; supported: PDF, DOCX, HTML, Markdown, text, source code"
        )
    if st.st_size == 0:
        raise ParseError("empty file")
    try:
        with open(p, "rb") as fh:
            fh.read(1)
    except PermissionError as exc:
        raise ParseError(f"unreadable: permission denied ({exc.strerror})") from exc
    except OSError as exc:
        raise ParseError(f"unreadable: {exc.strerror or exc}") from exc
    return st


def parse_file(path: str | os.PathLike) -> Iterator[Unit]:
    """Stream the units of one file; raises ParseError for anything unusable."""
    p = Path(path)
    st = check_file(p)
    ext = p.suffix.lower()
    try:
        if ext == ".pdf":
            yield from _parse_pdf(p)
        elif ext == ".docx":
            yield from _parse_docx(p)
        elif ext in MARKDOWN_EXT and st.st_size <= MAX_STRUCTURED_BYTES:
            yield from _parse_markdown(_read_text(p))
        elif ext in HTML_EXT:
            yield from _parse_html(p)
        else:
            yield from _parse_text(p, code=ext in CODE_EXT)
    except ParseError:
        raise
    except PermissionError as exc:
        raise ParseError(f"unreadable: permission denied ({exc.strerror})") from exc
    except UnicodeError as exc:
        raise ParseError(f"cannot decode text: {exc}") from exc
    except OSError as exc:
        raise ParseError(f"read error: {exc.strerror or exc}") from exc


# ---------------------------------------------------------------- plain text / code


def sniff_encoding(sample: bytes) -> str:
    """'utf-8' / 'utf-16' / 'cp1252' for text; ParseError for binary content."""
    if sample.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return "utf-16"
    if b"\x00" in sample:
        raise ParseError("binary content (NUL bytes), not text")
    try:
        # An incremental decoder tolerates a multi-byte character cut at the end of the sample.
        codecs.getincrementaldecoder("utf-8-sig")().decode(sample, final=False)
        return "utf-8-sig"
    except UnicodeDecodeError:
        pass
    text = sample.decode("cp1252", errors="replace")
    control = sum(1 for ch in text if (ord(ch) < 32 and ch not in "\t\n\r\f") or ch == "\ufffd")
    if control > 0.05 * max(1, len(text)):
        raise ParseError("binary content (not valid UTF-8 and mostly non-printable), not text")
    return "cp1252"


def _read_text(p: Path) -> str:
    with open(p, "rb") as fh:
        data = fh.read()
    return data.decode(sniff_encoding(data[:SNIFF_BYTES]), errors="replace")


def _parse_text(p: Path, code: bool) -> Iterator[Unit]:
    """Lines streamed from disk; a blank line starts a new block. Code keeps its whitespace;
    in prose, runs of whitespace collapse to one space."""
    with open(p, "rb") as fh:
        encoding = sniff_encoding(fh.read(SNIFF_BYTES))
    kind = "code" if code else "text"
    blank = True
    with open(p, encoding=encoding, errors="replace", newline=None) as fh:
        for n, piece, first in _line_pieces(fh):
            if first and not piece.strip():
                blank = True
                continue
            if not code and "\x00" in piece:
                raise ParseError(f"binary content at line {n}, not text")
            # Prose: collapse runs of spaces (padding, justified text); code keeps every byte.
            text = piece if code else " ".join(piece.split())
            if text:
                yield Unit(text, kind, blank and first, None, n, n)
                blank = False


def _line_pieces(fh: TextIO) -> Iterator[tuple[int, str, bool]]:
    """(line number, text, is the line's first piece) for each line of a text stream, without
    its newline. A line longer than MAX_UNIT_CHARS comes in pieces, each cut after the last
    whitespace of its second half (or at the limit when there is none): memory per piece is
    bounded whatever the line's length."""
    n, carry, first = 1, "", True
    while True:
        raw = fh.readline(MAX_UNIT_CHARS)
        piece = carry + raw
        if raw.endswith("\n") or not raw:
            if raw or carry:
                yield n, piece.rstrip("\n"), first
            if not raw:
                return
            n, carry, first = n + 1, "", True
            continue
        cut = _cut_point(piece)
        yield n, piece[:cut], first
        carry, first = piece[cut:], False


def _cut_point(text: str) -> int:
    """Where to cut an over-long piece: after the last whitespace in its second half, else its end."""
    cut = max(text.rfind(c, len(text) // 2) for c in " \n\t\r\f\v")
    return cut + 1 if cut >= 0 else len(text)


def bounded_pieces(text: str, limit: int = MAX_UNIT_CHARS) -> Iterator[str]:
    """``text`` in consecutive pieces of at most ``limit`` characters, cut after whitespace where
    possible (linear time: no re-slicing of the remainder)."""
    start = 0
    while len(text) - start > limit:
        cut = start + _cut_point(text[start : start + limit])
        yield text[start:cut]
        start = cut
    yield text[start:]


# ---------------------------------------------------------------- markdown


def _parse_markdown(text: str) -> Iterator[Unit]:
    lines = text.splitlines()
    tokens = MarkdownIt("commonmark").enable("table").parse(text)
    headings: list[tuple[int, str]] = []
    covered = 0  # source lines before this index were already emitted (nested blocks)
    for i, tok in enumerate(tokens):
        if tok.map is None or tok.nesting == -1:
            continue
        start, end = tok.map
        if tok.type == "heading_open":
            level = int(tok.tag[1:])
            title = tokens[i + 1].content.strip() if i + 1 < len(tokens) else ""
            headings = [h for h in headings if h[0] < level] + [(level, title)]
            path = tuple(h[1] for h in headings)
            yield Unit(lines[start].strip(), "heading", True, None, start + 1, end, path)
            covered = end
            continue
        if tok.type not in {"paragraph_open", "fence", "code_block", "html_block", "table_open", "hr"}:
            continue
        if start < covered:
            continue
        kind = "code" if tok.type in {"fence", "code_block"} else "text"
        path = tuple(h[1] for h in headings)
        first = True
        for n in range(start, min(end, len(lines))):
            line = lines[n] if kind == "code" else lines[n].strip()
            if not line.strip():
                continue
            yield Unit(line, kind, first, None, n + 1, n + 1, path)
            first = False
        covered = end


# ---------------------------------------------------------------- HTML

_HTML_BLOCKS = {
    "p", "li", "pre", "td", "th", "blockquote", "dt", "dd", "figcaption", "caption", "div",
    "section", "article", "main", "body", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "address",
    "summary",
}  # fmt: skip
_HTML_SKIP = {"script", "style", "noscript", "template", "head", "svg", "title"}


_HTML_VOID = {
    "area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param", "source", "track", "wbr",
}  # fmt: skip
_HTML_HEADINGS = {"h1", "h2", "h3", "h4", "h5", "h6"}


def _parse_html(p: Path) -> Iterator[Unit]:
    """HTML streamed through the incremental parser, READ_CHARS at a time: any size, bounded memory."""
    with open(p, "rb") as fh:
        encoding = sniff_encoding(fh.read(SNIFF_BYTES))
    parser = _HtmlUnits()
    with open(p, encoding=encoding, errors="replace", newline=None) as fh:
        while block := fh.read(READ_CHARS):
            parser.feed(block)
            yield from parser.drain()
    parser.close()
    parser.finish()
    yield from parser.drain()


class _HtmlUnits(HTMLParser):
    """Text of each block element (p, li, td, pre, h1..., or the nearest enclosing one) as units,
    with the heading path and the block's source line; script, style and similar are skipped.

    Text belongs to the innermost open ``pre``, else the innermost block element, else the
    document itself. A block longer than MAX_UNIT_CHARS is emitted in pieces as it streams.
    End tags close up to the matching open element (stray ones are ignored), so unclosed
    ``<p>``/``<li>`` cost nothing and a missing ``</head>`` ends at ``<body>``.
    """

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[tuple[str, int, int]] = []  # (tag, element id, source line)
        self.ids = itertools.count(1)
        self.skipping = 0  # open elements whose text is not content
        self.headings: list[tuple[int, str]] = []
        self.block: tuple[str, int, int] | None = None  # the element the buffered text belongs to
        self.buf: list[str] = []
        self.buf_chars = 0
        self.block_first = True  # nothing of the current block emitted yet
        self.block_lines = 0  # pre: source lines of the block already emitted
        self.out: list[Unit] = []

    # ---- HTMLParser callbacks
    def handle_starttag(self, tag: str, attrs) -> None:
        if tag in _HTML_VOID:
            if tag == "br":
                self._text("\n")
            return
        if tag == "body":
            self._close("head")
        if tag in _HTML_SKIP:
            self.skipping += 1
        self.stack.append((tag, next(self.ids), self.getpos()[0]))

    def handle_startendtag(self, tag: str, attrs) -> None:
        if tag == "br":
            self._text("\n")

    def handle_endtag(self, tag: str) -> None:
        self._close(tag)

    def handle_data(self, data: str) -> None:
        self._text(data)

    # ---- state
    def _close(self, tag: str) -> None:
        for i in range(len(self.stack) - 1, -1, -1):
            if self.stack[i][0] == tag:
                self.skipping -= sum(t in _HTML_SKIP for t, _, _ in self.stack[i:])
                del self.stack[i:]
                return

    def _owner(self) -> tuple[str, int, int]:
        for entry in reversed(self.stack):
            if entry[0] == "pre":
                return entry
        for entry in reversed(self.stack):
            if entry[0] in _HTML_BLOCKS:
                return entry
        return ("", 0, self.getpos()[0])  # text outside any block: the document's own

    def _text(self, data: str) -> None:
        if self.skipping:
            return
        owner = self._owner()
        if self.block is None or owner[:2] != self.block[:2]:
            self._flush(final=True)
            self.block, self.block_first, self.block_lines = owner, True, 0
        if self.block[0] in _HTML_HEADINGS and self.buf_chars >= MAX_UNIT_CHARS:
            return  # a heading is a title: its first MAX_UNIT_CHARS characters are plenty
        self.buf.append(data)
        self.buf_chars += len(data)
        if self.buf_chars > 2 * MAX_UNIT_CHARS and self.block[0] not in _HTML_HEADINGS:
            self._flush(final=False)

    def finish(self) -> None:
        self._flush(final=True)

    def drain(self) -> list[Unit]:
        out, self.out = self.out, []
        return out

    def _flush(self, final: bool) -> None:
        """Emit the buffered text of the current block (all of it, or up to a cut between words)."""
        if self.block is None or not self.buf:
            self.buf, self.buf_chars = [], 0
            return
        text = "".join(self.buf)
        rest = ""
        if not final:
            cut = text.rfind("\n") + 1 if self.block[0] == "pre" else 0
            cut = cut if cut > len(text) // 2 else _cut_point(text)
            text, rest = text[:cut], text[cut:]
        self.buf, self.buf_chars = ([rest], len(rest)) if rest else ([], 0)
        tag, _, line = self.block
        path = tuple(h[1] for h in self.headings)
        if tag == "pre":
            lines = text.split("\n")
            for k, code_line in enumerate(lines):
                if code_line.strip():
                    n = line + self.block_lines + k
                    self.out.append(Unit(code_line, "code", self.block_first, None, n, n, path))
                    self.block_first = False
            self.block_lines += len(lines) - 1
            return
        body = " ".join(text.split())
        if not body:
            return
        if tag in _HTML_HEADINGS:
            body = clean_heading(body)
            if not body:
                return
            level = int(tag[1])
            self.headings = [h for h in self.headings if h[0] < level] + [(level, body)]
            self.out.append(Unit(body, "heading", True, None, line, line, tuple(h[1] for h in self.headings)))
            return
        self.out.append(Unit(body, "text", self.block_first, None, line, line, path))
        self.block_first = False


# ---------------------------------------------------------------- DOCX


def _parse_docx(p: Path) -> Iterator[Unit]:
    try:
        document = docx.Document(str(p))
    except PackageNotFoundError as exc:
        raise ParseError("corrupt DOCX (not a Word .docx package)") from exc
    except Exception as exc:  # zipfile.BadZipFile, KeyError on missing parts, lxml errors
        raise ParseError(f"corrupt DOCX: {exc}") from exc
    headings: list[tuple[int, str]] = []
    for n, item in enumerate(document.iter_inner_content(), start=1):
        if isinstance(item, Table):
            path = tuple(h[1] for h in headings)
            first = True
            for row in item.rows:
                cells = [" ".join(c.text.split()) for c in row.cells]
                line = " | ".join(c for c in cells if c)
                if line:
                    yield Unit(line, "text", first, None, n, n, path)
                    first = False
            continue
        text = " ".join(item.text.split())
        if not text:
            continue
        style = (item.style.name if item.style is not None else "") or ""
        level = _docx_heading_level(style)
        if level is not None:
            headings = [h for h in headings if h[0] < level] + [(level, text)]
            yield Unit(text, "heading", True, None, n, n, tuple(h[1] for h in headings))
        else:
            yield Unit(text, "text", True, None, n, n, tuple(h[1] for h in headings))


def _docx_heading_level(style: str) -> int | None:
    if style == "Title":
        return 0
    if style.startswith("Heading"):
        tail = style[len("Heading") :].strip()
        return int(tail) if tail.isdigit() else 1
    return None


# ---------------------------------------------------------------- PDF


def _parse_pdf(p: Path) -> Iterator[Unit]:
    try:
        reader = PdfReader(str(p))
        encrypted = reader.is_encrypted
    except (PdfReadError, PdfStreamError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ParseError(f"corrupt PDF: {exc}") from exc
    if encrypted:
        try:
            opened = bool(reader.decrypt(""))  # many PDFs are "encrypted" with an empty user password
        except Exception:  # e.g. an AES cipher without the optional crypto backend
            opened = False
        if not opened:
            raise ParseError("encrypted PDF: a password is required")
    try:
        n_pages = len(reader.pages)
    except FileNotDecryptedError as exc:
        raise ParseError("encrypted PDF: a password is required") from exc
    except (PdfReadError, PdfStreamError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ParseError(f"corrupt PDF: {exc}") from exc
    found = False
    scans = PageReader(p)
    try:
        for page_no in range(1, n_pages + 1):
            units = list(_pdf_text_layer(reader, page_no)) or list(_pdf_ocr(scans, page_no))
            found = found or bool(units)
            yield from units
    finally:
        scans.close()
    if not found:
        raise ParseError("PDF has no text: no text layer, and OCR found none on its pages")


def _pdf_text_layer(reader: PdfReader, page_no: int) -> Iterator[Unit]:
    try:
        text = reader.pages[page_no - 1].extract_text() or ""
    except FileNotDecryptedError as exc:
        raise ParseError("encrypted PDF: a password is required") from exc
    except Exception as exc:  # pypdf raises many types on damaged content streams
        raise ParseError(f"corrupt PDF (page {page_no}): {exc}") from exc
    first = True
    for n, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            yield Unit(line.strip(), "text", first, page_no, n, n)
            first = False


def _pdf_ocr(scans: PageReader, page_no: int) -> Iterator[Unit]:
    """A page without a text layer (a scan): its rendered image read by OCR, line by line."""
    try:
        lines = scans.lines(page_no)
    except OcrUnavailable as exc:
        raise ParseError(f"page {page_no} has no text layer and needs OCR, but {exc}") from exc
    except pypdfium2.PdfiumError as exc:
        raise ParseError(f"corrupt PDF (page {page_no} cannot be rendered for OCR): {exc}") from exc
    blank = True
    for n, line in enumerate(lines, start=1):
        if not line:
            blank = True
            continue
        yield Unit(line, "text", blank, page_no, n, n, ocr=True)
        blank = False
