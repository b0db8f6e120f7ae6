"""Scanned PDFs: pages without a text layer are read by Tesseract OCR (real binary, real PDFs).

The test PDFs are made here: Pillow draws known sentences into an image, fpdf2 puts the
image on a page (no text layer, as a scanner would), so nothing is downloaded.

Run: .venv/bin/python -m pytest tests/rag/test_rag_ocr.py -q
"""

from __future__ import annotations

from pathlib import Path

import pytest
from fpdf import FPDF
from PIL import Image, ImageDraw, ImageFont
from rag_docgen import assert_consistent, write

from localrag.rag.parse import ParseError, parse_file

PLANTED = "The lighthouse keeper counts seventeen gulls every morning."


def scanned_page(lines: list[str]) -> Image.Image:
    """A white 'scan' with the lines in black, about 280 dpi once placed on an A4 page."""
    font = ImageFont.load_default(size=44)
    image = Image.new("L", (2000, 120 + 80 * len(lines)), color=255)
    draw = ImageDraw.Draw(image)
    for i, line in enumerate(lines):
        draw.text((60, 60 + 80 * i), line, fill=0, font=font)
    return image


def make_scanned_pdf(path: Path, pages: list[list[str] | str]) -> Path:
    """One page per item: a list of lines becomes an image-only page, a string a text-layer page."""
    pdf = FPDF()
    pdf.set_font("Helvetica", size=11)
    for page in pages:
        pdf.add_page()
        if isinstance(page, str):
            pdf.cell(0, 6, page, new_x="LMARGIN", new_y="NEXT")
        else:
            pdf.image(scanned_page(page), x=15, y=20, w=180)
    path.parent.mkdir(parents=True, exist_ok=True)
    pdf.output(str(path))
    return path


@pytest.fixture
def scan(tmp_path) -> Path:
    return make_scanned_pdf(
        tmp_path / "docs" / "scan.pdf",
        [
            "Chapter one covers the boiler and its pressure valve.",
            ["Harbour log, second page.", PLANTED, "Fog signals sound at dusk."],
        ],
    )


def test_page_without_text_layer_is_read_by_ocr(scan):
    units = list(parse_file(scan))
    assert {u.page for u in units} == {1, 2}
    assert all(not u.ocr for u in units if u.page == 1)
    ocr_text = " ".join(u.text for u in units if u.page == 2)
    assert all(u.ocr for u in units if u.page == 2)
    assert "seventeen gulls" in ocr_text and "lighthouse keeper" in ocr_text


def test_search_finds_the_planted_sentence_cited_with_its_page(make_index, scan):
    idx = make_index()
    report = idx.ingest([scan.parent])
    assert (report.added, report.failed) == (1, [])
    hit = idx.search("how many gulls does the lighthouse keeper count?", k=3)[0]
    assert hit.file == str(scan) and hit.page == 2 and hit.ocr
    assert "seventeen gulls" in hit.text
    assert hit.citation() == "scan.pdf p.2 (OCR)"
    text_hit = idx.search("boiler pressure valve chapter", k=1)[0]
    assert text_hit.citation() == "scan.pdf p.1"  # the text-layer page is not marked
    assert_consistent(idx)


def test_missing_tesseract_fails_only_that_file_with_the_reason(make_index, scan, tmp_path, monkeypatch):
    note = write(scan.parent / "note.txt", "Compost wants turning every fortnight.\n")
    empty_bin = tmp_path / "no-tesseract-here"
    empty_bin.mkdir()
    monkeypatch.setenv("PATH", str(empty_bin))  # the tesseract binary cannot be found
    idx = make_index()
    report = idx.ingest([scan.parent])
    assert report.added == 1 and [p for p, _ in report.failed] == [str(scan)]
    reason = report.failed[0][1]
    assert reason.startswith("page 2 has no text layer and needs OCR") and "Tesseract" in reason
    assert "not installed" in reason
    assert idx.search("compost fortnight", k=1)[0].file == str(note)
    docs = {Path(d.path).name: d for d in idx.list_documents()}
    assert docs["scan.pdf"].status == "failed" and docs["note.txt"].status == "indexed"
    assert_consistent(idx)  # nothing of the scan's first page was left behind


def test_scan_with_nothing_readable_is_reported(tmp_path):
    blank = make_scanned_pdf(tmp_path / "blank.pdf", [[]])
    with pytest.raises(ParseError, match="no text layer, and OCR found none"):
        list(parse_file(blank))
