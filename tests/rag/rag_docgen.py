"""Real test documents written with real libraries (fpdf2 for PDFs with a text layer,
pypdf for encryption, python-docx for DOCX). Imported by the tests in this folder."""

from __future__ import annotations

import random
from pathlib import Path

WORDS = [
    "river",
    "mountain",
    "cache",
    "index",
    "vector",
    "token",
    "parser",
    "manifest",
    "chunk",
    "kernel",
    "lattice",
    "harbor",
    "meadow",
    "quartz",
    "violet",
    "saddle",
    "orbit",
    "pepper",
    "candle",
    "signal",
    "marble",
    "falcon",
    "ember",
    "willow",
    "copper",
    "garden",
    "thunder",
    "pilot",
    "lantern",
    "canyon",
    "ribbon",
    "glacier",
    "compass",
    "velvet",
    "anchor",
    "prism",
    "summit",
    "tundra",
]


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def prose(n_words: int, seed: int) -> str:
    rng = random.Random(seed)
    words = [rng.choice(WORDS) for _ in range(n_words)]
    lines, line = [], []
    for i, w in enumerate(words, start=1):
        line.append(w)
        if i % 12 == 0:
            lines.append(" ".join(line) + ".")
            line = []
    if line:
        lines.append(" ".join(line) + ".")
    return "\n".join(lines)


def make_pdf(path: Path, pages: list[str]) -> Path:
    from fpdf import FPDF

    pdf = FPDF()
    pdf.set_font("Helvetica", size=11)
    for text in pages:
        pdf.add_page()
        for line in text.splitlines():
            pdf.cell(0, 6, line, new_x="LMARGIN", new_y="NEXT")
    path.parent.mkdir(parents=True, exist_ok=True)
    pdf.output(str(path))
    return path


def make_encrypted_pdf(path: Path, text: str, password: str = "secret") -> Path:
    from pypdf import PdfReader, PdfWriter

    plain = make_pdf(path.with_suffix(".plain.pdf"), [text])
    writer = PdfWriter()
    for page in PdfReader(str(plain)).pages:
        writer.add_page(page)
    writer.encrypt(user_password=password, owner_password=password + "-owner", algorithm="RC4-128")
    with open(path, "wb") as fh:
        writer.write(fh)
    plain.unlink()
    return path


def make_docx(path: Path, sections: list[tuple[str, list[str]]]) -> Path:
    import docx

    document = docx.Document()
    document.add_heading("Handbook", level=0)
    for title, paragraphs in sections:
        document.add_heading(title, level=1)
        for para in paragraphs:
            document.add_paragraph(para)
    path.parent.mkdir(parents=True, exist_ok=True)
    document.save(str(path))
    return path


def assert_consistent(idx) -> None:
    """The crash-safety invariant: no orphan chunks, no file marked done with chunks missing."""
    files = idx.manifest.files(idx.config.collection)
    col = idx._collection(idx.space, create=False)
    total = 0
    for rec in files:
        got = col.get(where={"ver": rec.ver}, include=[])
        assert len(got["ids"]) == rec.n_chunks, rec.path
        total += rec.n_chunks
    assert idx.chunk_count() == total
    assert idx.manifest.pending() == [] and idx.manifest.garbage() == []
