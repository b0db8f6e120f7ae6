"""A PDF citation opened at its page (``localrag.rag.pages``), on real PDFs written by fpdf2.

The passages are the index's own chunks (pypdf text, cut by the real chunker), so the match is
tested across the two libraries' different spacing; the highlight is checked against PDFium's own
box of every character, and the PNG against a render without highlight.

Run: .venv/bin/python -m pytest tests/rag/test_pages.py -q
"""

from __future__ import annotations

import io

import numpy as np
import pypdfium2
import pytest
from PIL import Image
from pypdf import PdfReader, PdfWriter
from rag_docgen import make_pdf, prose, write

from localrag.rag.chunk import Chunker
from localrag.rag.pages import PageError, _key, find_passage, page_count, render_page
from localrag.rag.parse import parse_file

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def three_pages(tmp_path):
    pages = [
        "Harbor notes: the tide tables of the northern harbor.\n" + prose(60, seed=1),
        "Glacier survey results for the second season.\n" + prose(60, seed=2) + "\nThe ice is retreating quickly.",
        "Appendix with lantern inventories.\n" + prose(60, seed=3),
    ]
    return make_pdf(tmp_path / "report.pdf", pages)


def _chunks(path, counter, tokens=40):
    return list(Chunker(counter, tokens, 4).chunks(parse_file(path)))


def test_every_chunk_is_found_on_its_page_and_its_boxes_cover_exactly_its_characters(three_pages, counter):
    chunks = _chunks(three_pages, counter)
    assert {c.page for c in chunks} == {1, 2, 3} and len(chunks) > 3
    pdf = pypdfium2.PdfDocument(str(three_pages))
    for chunk in chunks:
        found = find_passage(three_pages, chunk.page, chunk.text)
        assert found.found and found.exact and found.boxes and found.note == "", chunk.text
        start, end = found.chars
        textpage = pdf[chunk.page - 1].get_textpage()
        # the span's own text is the chunk's text, up to spacing and line breaks
        assert _key(textpage.get_text_range(start, end - start))[0] == _key(chunk.text)[0]
        for i in range(textpage.count_chars()):
            if not textpage.get_text_range(i, 1).isalnum():
                continue
            left, bottom, right, top = textpage.get_charbox(i)
            x, y = (left + right) / 2, (bottom + top) / 2
            inside = any(box.contains(x, y) for box in found.boxes)
            assert inside == (start <= i < end), f"char {i} of page {chunk.page}: inside={inside}"
        for other in {1, 2, 3} - {chunk.page}:
            elsewhere = find_passage(three_pages, other, chunk.text)
            assert not elsewhere.found and elsewhere.boxes == () and "not found on page" in elsewhere.note
    pdf.close()


def test_spacing_hyphenation_and_small_differences_still_match(tmp_path):
    pdf = make_pdf(tmp_path / "wrap.pdf", ["The committee discussed the recon-\nstruction of the old bridge\n"
                                           "near   the   harbor in spring."])
    exact = find_passage(pdf, 1, "discussed the reconstruction of the\nold bridge near the harbor")
    assert exact.exact and len(exact.boxes) == 3  # one rectangle per line it spans
    # a word the PDF does not have (as OCR or another extractor might differ): matched, not exactly
    fuzzy = find_passage(pdf, 1, "discussed the reconstruction of the old stone bridge near the harbor")
    assert fuzzy.found and not fuzzy.exact and len(fuzzy.boxes) == 3
    assert find_passage(pdf, 1, "an unrelated sentence about glaciers").found is False
    assert "no letters or digits" in find_passage(pdf, 1, " -- ... ").note


def test_the_png_decodes_at_its_scale_and_only_the_boxes_change(three_pages, counter):
    chunk = next(c for c in _chunks(three_pages, counter) if c.page == 2)
    image = render_page(three_pages, 2, passage=chunk.text, scale=2.0)
    plain = render_page(three_pages, 2, scale=2.0)
    assert image.png.startswith(PNG) and plain.png.startswith(PNG)
    decoded = Image.open(io.BytesIO(image.png))
    decoded.load()
    width_pt, height_pt = pypdfium2.PdfDocument(str(three_pages))[1].get_size()
    assert decoded.format == "PNG" and decoded.size == (image.width, image.height)
    assert abs(image.width - width_pt * 2) <= 1 and abs(image.height - height_pt * 2) <= 1
    assert (image.page, image.n_pages, image.prev_page, image.next_page) == (2, 3, 1, 3)
    assert image.boxes == find_passage(three_pages, 2, chunk.text).boxes and plain.boxes == ()

    a = np.asarray(decoded.convert("RGB"), dtype=int)
    b = np.asarray(Image.open(io.BytesIO(plain.png)).convert("RGB"), dtype=int)
    changed = np.abs(a - b).sum(axis=2) > 0
    assert changed.any()
    # each box mapped to pixels by hand (origin top-left, y flipped; no crop offset, no rotation)
    allowed = np.zeros_like(changed)
    for box in image.boxes:
        x0, x1 = int(box.left * 2) - 1, int(box.right * 2) + 2
        y0, y1 = int((height_pt - box.top) * 2) - 1, int((height_pt - box.bottom) * 2) + 2
        allowed[y0:y1, x0:x1] = True
        assert changed[y0 + 2:y1 - 2, x0 + 2:x1 - 2].mean() > 0.95  # the whole box is tinted
    assert not (changed & ~allowed).any(), "pixels changed outside the highlighted boxes"
    ink = b.sum(axis=2) < 300  # the passage's text is under the tint
    assert (ink & changed).sum() > 100


def test_a_rotated_page_is_highlighted_over_its_text(tmp_path):
    src = make_pdf(tmp_path / "upright.pdf", ["Rotated pages keep their words in place.\nA second line."])
    writer = PdfWriter()
    for page in PdfReader(str(src)).pages:
        writer.add_page(page).rotate(90)
    rotated = tmp_path / "rotated.pdf"
    with open(rotated, "wb") as fh:
        writer.write(fh)
    image = render_page(rotated, 1, passage="keep their words in place", scale=1.0)
    plain = render_page(rotated, 1, scale=1.0)
    assert image.width > image.height  # a portrait page turned a quarter
    a = np.asarray(Image.open(io.BytesIO(image.png)).convert("RGB"), dtype=int)
    b = np.asarray(Image.open(io.BytesIO(plain.png)).convert("RGB"), dtype=int)
    changed = np.abs(a - b).sum(axis=2) > 0
    ink = b.sum(axis=2) < 300
    assert changed.any() and (ink & changed).sum() > 0.5 * (ink & _rows_or_cols(changed)).sum()


def _rows_or_cols(mask: np.ndarray) -> np.ndarray:
    """The bounding rectangle of a mask (where a highlight could lie at all)."""
    ys, xs = np.nonzero(mask)
    out = np.zeros_like(mask)
    out[ys.min():ys.max() + 1, xs.min():xs.max() + 1] = True
    return out


def test_page_counts_and_clear_errors(tmp_path, three_pages):
    assert page_count(three_pages) == 3
    first, last = render_page(three_pages, 1, scale=0.5), render_page(three_pages, 3, scale=0.5)
    assert (first.prev_page, first.next_page, last.prev_page, last.next_page) == (None, 2, 2, None)
    with pytest.raises(PageError, match="has 3 page\\(s\\): there is no page 4"):
        render_page(three_pages, 4)
    with pytest.raises(PageError, match="there is no page 0"):
        find_passage(three_pages, 0, "harbor")
    not_pdf = write(tmp_path / "notes.pdf", "just text, not a PDF\n")
    with pytest.raises(PageError, match="notes.pdf is not a PDF"):
        render_page(not_pdf, 1)
    with pytest.raises(PageError, match="cannot open missing.pdf"):
        page_count(tmp_path / "missing.pdf")
    broken = tmp_path / "broken.pdf"
    broken.write_bytes(b"%PDF-1.4\n" + b"garbage " * 100)
    with pytest.raises(PageError, match="cannot be opened as a PDF"):
        render_page(broken, 1)
    with pytest.raises(PageError, match="scale must be"):
        render_page(three_pages, 1, scale=0)
    missing = render_page(three_pages, 1, passage="a passage that is on no page at all", scale=0.5)
    assert missing.png.startswith(PNG) and missing.boxes == () and "not found on page 1" in missing.note


def test_a_page_without_a_text_layer_says_so(tmp_path):
    from fpdf import FPDF

    pdf = FPDF()
    pdf.add_page()
    pdf.rect(20, 20, 50, 30)  # drawn, but no text
    path = tmp_path / "drawing.pdf"
    pdf.output(str(path))
    image = render_page(path, 1, passage="anything", scale=0.5)
    assert image.png.startswith(PNG) and image.boxes == () and "no text layer" in image.note
