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


# Crash tests cut text into 32-token chunks: many distinct chunks that cost little to embed, so
# those tests spend their time writing and killing. (Repeated text would be cheaper still, but
# identical chunks of a file are stored once.)
SMALL_CHUNKS = {"chunk_tokens": 32, "overlap_tokens": 4}


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


def make_pdf_with_wrong_xref(path: Path, text: str) -> Path:
    """A PDF whose ``startxref`` points a few bytes off: pypdf recovers (and logs warnings)."""
    import re

    data = make_pdf(path, [text]).read_bytes()
    m = re.search(rb"startxref\s+(\d+)", data)
    path.write_bytes(data[: m.start(1)] + str(int(m.group(1)) + 7).encode() + data[m.end(1) :])
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
    """The three-way consistency check: manifest rows = Chroma ids = BM25 ids.

    Every live file's chunks are all in Chroma (ids ``<ver>:0 .. <ver>:<n-1>``), Chroma holds
    nothing else in the collection's space (no orphans), BM25 indexes exactly those ids, and
    no version is pending or waiting to be deleted.
    """
    files = idx.manifest.files(idx.config.collection)
    assert all(rec.space == idx.space for rec in files), "stale files left"
    expected = {f"{rec.ver}:{i}" for rec in files for i in range(rec.n_chunks)}
    in_chroma = idx.store.ids(idx.space)
    assert in_chroma == expected, (
        f"{len(in_chroma - expected)} orphan chunk(s) in Chroma, {len(expected - in_chroma)} missing"
    )
    assert idx.chunk_count() == len(expected)
    bm25 = idx.bm25_ids()
    assert len(bm25) == len(set(bm25)) and set(bm25) == expected, "BM25 differs from the manifest"
    assert idx.manifest.pending() == [] and idx.manifest.garbage() == []
    _assert_dense_graph_whole(idx)


def _assert_dense_graph_whole(idx) -> None:
    """Every stored vector is reachable in the dense graph (a query with it finds a vector at
    distance 0: itself or an identical chunk's), and the graph holds no vector Chroma has no
    record of (a hit without metadata)."""
    import numpy as np

    with idx.store.session():
        col = idx._collection(idx.space, create=False)
        if col is None or col.count() == 0:
            return
        got = col.get(include=["embeddings"])
        res = col.query(
            query_embeddings=np.asarray(got["embeddings"]), n_results=1, include=["metadatas", "distances"]
        )
    unreachable = [cid for cid, d in zip(got["ids"], res["distances"], strict=True) if not d or d[0] > 1e-4]
    ghosts = sum(m[0] is None for m in res["metadatas"] if m)
    assert not unreachable and not ghosts, f"{len(unreachable)} unreachable vectors, {ghosts} ghost hits"
