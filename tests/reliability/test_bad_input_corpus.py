"""The bad-input corpus, generated here, ingested by the CLI as a user runs it: each bad file is
refused with its reason or indexed in bounded time, nothing leaks to stderr, every good file
beside them is indexed, ``docs list`` keeps one line per document, and the index ends
consistent (the three-way check).

    huge single line (3 MB)   linear-time chunking, memory bounded by the piece size
    9 MB HTML of <script>     parsed as HTML (the script skipped), not read as text
    FIFO named .txt           refused without being opened
    symlink loop              reported as a loop
    newline in a file name    indexed; listed on one line, the newline escaped
    PDF with a wrong xref     indexed; pypdf's recovery warnings stay off stderr
    file over --max-file-mb   refused with the limit, never read
    empty / binary / unknown  refused with the reason

Run: .venv/bin/python -m pytest tests/reliability/test_bad_input_corpus.py -q
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from harness import ROOT, child_env
from rag_docgen import assert_consistent, make_pdf, make_pdf_with_wrong_xref, prose, write

from localrag.rag.config import IndexConfig
from localrag.rag.index import DocumentIndex

pytestmark = [pytest.mark.slow, pytest.mark.reliability]

NEWLINE_NAME = "two\nlines.md"


def _corpus(docs: Path) -> dict[str, str]:
    """Writes the corpus; returns {file name: expected failure reason prefix} for the bad ones."""
    write(docs / "good.md", "# Good\n\nThe lighthouse keeper trims the wick at dusk.\n")
    write(docs / "notes.txt", prose(200, seed=4))
    make_pdf(docs / "fine.pdf", ["The glacier advanced ten metres last winter."])
    make_pdf_with_wrong_xref(docs / "shaky.pdf", "The quokka smiles at every visitor.")
    sentence = "the night ferry crosses the straits when the harbour lights turn green "
    write(docs / "one_line.txt", sentence * (3 * 2**20 // len(sentence)) + "\n")
    script = "var x = 1; function f(a) { return a * 2; } // padding padding padding\n" * (9 * 2**20 // 70)
    write(
        docs / "page.html",
        "<html><head><title>Big</title></head><body><h1>Release notes</h1>"
        "<p>The aurora dashboard now exports quarterly tangerine reports.</p>"
        f"<script>{script}</script><p>Closing words.</p></body></html>",
    )
    write(docs / NEWLINE_NAME, "Narwhal tusks are long spiral teeth.\n")
    os.mkfifo(docs / "pipe.txt")
    os.symlink(docs / "loop.md", docs / "loop.md")
    os.symlink(docs / "gone.md", docs / "dangling.md")
    with open(docs / "huge.txt", "wb") as fh:
        fh.truncate(21 * 2**20)  # sparse: refused by size before anything reads it
    (docs / "empty.txt").write_bytes(b"")
    (docs / "binary.txt").write_bytes(bytes(range(256)) * 64)
    write(docs / "data.xyz", "unknown format\n")
    return {
        "pipe.txt": "not a regular file",
        "loop.md": "symlink loop",
        "dangling.md": "broken symlink",
        "huge.txt": "file is 21 MB, over the per-file limit of 20 MB",
        "empty.txt": "empty file",
        "binary.txt": "binary content",
        "data.xyz": "unsupported file type",
    }


def _cli(index_dir: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "localrag", *args, "--index-dir", str(index_dir)],
        capture_output=True, text=True, cwd=ROOT, env=child_env(), timeout=400,
    )  # fmt: skip


def test_bad_input_corpus_through_the_cli(tmp_path, embedder):
    docs, index_dir = tmp_path / "docs", tmp_path / "index"
    bad = _corpus(docs)
    out = _cli(index_dir, "ingest", str(docs), "--json", "--max-file-mb", "20")
    assert out.returncode == 0, out.stderr
    assert out.stderr == ""  # no pypdf warnings, no tracebacks, nothing
    report = json.loads(out.stdout)
    reasons = {Path(f["path"]).name: f["reason"] for f in report["failed"]}
    assert set(reasons) == set(bad)
    for name, prefix in bad.items():
        assert reasons[name].startswith(prefix), (name, reasons[name])
        assert "\n" not in reasons[name]
    assert report["added"] == 7  # good.md, notes.txt, fine.pdf, shaky.pdf, one_line.txt, page.html, the newline name

    listing = _cli(index_dir, "docs", "list")
    lines = listing.stdout.splitlines()
    assert len(lines) == 7 + len(bad)  # one line per document, the newline name included
    [line] = [ln for ln in lines if "two" in ln]
    assert line.endswith("two\\nlines.md") and line.startswith("indexed")

    idx = DocumentIndex(IndexConfig(index_dir=index_dir), embedder=embedder)
    by_name = {Path(d.path).name: d for d in idx.list_documents()}
    assert by_name["page.html"].chunks <= 2  # the script was skipped, not chunked as text
    assert idx.search("tangerine reports dashboard", k=1)[0].file == str(docs / "page.html")
    assert idx.search("quokka smiles", k=1)[0].file == str(docs / "shaky.pdf")
    hit = idx.search("night ferry harbour lights", k=1)[0]
    assert hit.file == str(docs / "one_line.txt") and hit.line_start == hit.line_end == 1
    assert idx.search("narwhal tusks", k=1)[0].file == str(docs / NEWLINE_NAME)
    assert_consistent(idx)
    idx.close()
