"""OCR of PDF pages that have no text layer (scans): PDFium renders the page, Tesseract reads it.

Tesseract is the Debian ``tesseract-ocr`` program (``scripts/setup.sh`` installs it),
driven through ``pytesseract``; ``pypdfium2`` renders the page whatever its images are
encoded with (JPEG, JBIG2, CCITT fax, several strips), so OCR sees the page as printed.

    reader = PageReader(Path("scan.pdf"))
    lines = reader.lines(3)          # the page's text lines, '' where a paragraph breaks
    reader.close()
"""

from __future__ import annotations

from pathlib import Path

import pypdfium2
import pytesseract

# Tesseract reads body text best at about 300 dpi; PDF user space is 72 units per inch.
OCR_DPI = 300
OCR_LANG = "eng"


class OcrUnavailable(RuntimeError):
    """Tesseract cannot run here; the message says why and how to install it."""


class PageReader:
    """Reads pages of one PDF with OCR; the file is opened by PDFium on the first page asked for."""

    def __init__(self, path: Path, dpi: int = OCR_DPI, lang: str = OCR_LANG) -> None:
        self.path = path
        self.dpi = dpi
        self.lang = lang
        self._pdf: pypdfium2.PdfDocument | None = None

    def lines(self, page_no: int) -> list[str]:
        """The text of 1-based page ``page_no`` as lines, stripped; '' marks a blank line."""
        if self._pdf is None:
            self._pdf = pypdfium2.PdfDocument(str(self.path))
        page = self._pdf[page_no - 1]
        try:
            image = page.render(scale=self.dpi / 72, grayscale=True).to_pil()
        finally:
            page.close()
        try:
            text = pytesseract.image_to_string(image, lang=self.lang)
        except pytesseract.TesseractNotFoundError as exc:
            raise OcrUnavailable(
                "Tesseract OCR is not installed (Debian: apt-get install tesseract-ocr; scripts/setup.sh does it)"
            ) from exc
        return [line.strip() for line in text.splitlines()]

    def close(self) -> None:
        if self._pdf is not None:
            self._pdf.close()
            self._pdf = None
