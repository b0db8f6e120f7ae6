"""Parsers and the token-aware chunker, on real files and the real MiniLM tokenizer.

Run: .venv/bin/python -m pytest tests/rag/test_rag_parse_chunk.py -q
"""

from __future__ import annotations

from pathlib import Path

import pytest
from rag_docgen import make_docx, make_pdf, prose

from localrag.rag.chunk import Chunker
from localrag.rag.parse import ParseError, parse_file

MARKDOWN = """# Guide

Intro paragraph line one.
Intro paragraph line two.

## Install

Run the installer.

```python
def main():

    return 42
```

### Linux

Use the package manager.
"""


def test_markdown_units_have_lines_and_heading_paths(tmp_path: Path):
    p = tmp_path / "guide.md"
    p.write_text(MARKDOWN)
    units = list(parse_file(p))
    by_text = {u.text: u for u in units}
    assert by_text["Intro paragraph line two."].line_start == 4
    assert by_text["Intro paragraph line two."].heading_path == ("Guide",)
    assert by_text["Use the package manager."].heading_path == ("Guide", "Install", "Linux")
    code = [u for u in units if u.kind == "code"]
    # Fenced code keeps its indentation; the blank line inside is not a block break.
    assert "    return 42" in [u.text for u in code]
    assert sum(u.new_block for u in code) == 1


def test_chunks_respect_token_limit_overlap_and_headings(tmp_path: Path, counter):
    body = prose(2000, seed=1)
    p = tmp_path / "long.md"
    p.write_text("# Part A\n\n" + body + "\n\n# Part B\n\nshort closing words.\n")
    chunks = list(Chunker(counter, max_tokens=120, overlap=24).chunks(parse_file(p)))
    assert len(chunks) > 10
    for c in chunks:
        assert c.n_tokens <= 120
        assert counter.count([c.text])[0] == c.n_tokens  # counted with the embedding tokenizer
    # Overlap: each chunk inside Part A starts with the last line of the previous chunk.
    part_a = [c for c in chunks if c.heading_path == ("Part A",)]
    for prev, nxt in zip(part_a, part_a[1:], strict=False):
        assert prev.text.splitlines()[-1] == nxt.text.splitlines()[0]
        assert nxt.line_start <= prev.line_end
    # A heading starts a fresh chunk; nothing of Part A leaks into Part B.
    last = chunks[-1]
    assert last.heading_path == ("Part B",)
    assert last.text.startswith("# Part B")
    assert "river" not in last.text.split("\n", 1)[1] or "closing" in last.text


def test_code_block_kept_whole_when_it_fits(tmp_path: Path, counter):
    code = "\n".join(f"    value_{i} = compute({i})" for i in range(12))
    text = prose(150, seed=2) + "\n\n```python\ndef f():\n" + code + "\n```\n\nAfter the code.\n"
    p = tmp_path / "code.md"
    p.write_text("# Doc\n\n" + text)
    chunks = list(Chunker(counter, max_tokens=200, overlap=16).chunks(parse_file(p)))
    holding = [c for c in chunks if "value_0" in c.text]
    assert holding and all("value_11" in c.text for c in holding)


def test_huge_line_is_split_between_words(tmp_path: Path, counter):
    p = tmp_path / "one_line.txt"
    p.write_text(" ".join(["incomprehensibilities"] * 600))
    chunks = list(Chunker(counter, max_tokens=100, overlap=10).chunks(parse_file(p)))
    assert len(chunks) > 5
    for c in chunks:
        assert c.n_tokens <= 100
        assert set(c.text.split()) == {"incomprehensibilities"}
        assert c.line_start == c.line_end == 1


def test_source_code_is_kept_intact(tmp_path: Path, counter):
    src = "import os\n\n\nclass A:\n    def f(self):\n        return os.sep\n"
    p = tmp_path / "mod.py"
    p.write_text(src)
    [chunk] = list(Chunker(counter).chunks(parse_file(p)))
    assert "class A:\n    def f(self):\n        return os.sep" in chunk.text
    assert (chunk.line_start, chunk.line_end) == (1, 6)


def test_pdf_pages_are_anchored(tmp_path: Path, counter):
    p = make_pdf(tmp_path / "report.pdf", ["alpha page one words", "beta page two words", "gamma page three"])
    chunks = list(Chunker(counter).chunks(parse_file(p)))
    assert [c.page for c in chunks] == [1, 2, 3]
    assert "beta" in chunks[1].text


def test_docx_headings_and_paragraph_numbers(tmp_path: Path, counter):
    p = make_docx(
        tmp_path / "hb.docx", [("Safety", ["Wear gloves.", "Keep calm."]), ("Travel", ["Book early."])]
    )
    units = list(parse_file(p))
    book = next(u for u in units if u.text == "Book early.")
    assert book.heading_path == ("Handbook", "Travel")
    assert book.line_start == 6  # paragraph number: title, heading, 2 paragraphs, heading, this
    chunks = list(Chunker(counter).chunks(parse_file(p)))
    assert any(c.heading_path == ("Handbook", "Safety") and "gloves" in c.text for c in chunks)


def test_html_blocks_headings_and_source_lines(tmp_path: Path):
    html = """<html><head><title>T</title><style>p{}</style></head><body>
<h1>Top</h1>
<p>First para with <b>bold</b> text.</p>
<h2>Sub</h2>
<ul><li>item one</li><li>item two</li></ul>
<pre>x = 1
    y = 2</pre>
<script>var hidden = 1;</script>
</body></html>"""
    p = tmp_path / "page.html"
    p.write_text(html)
    units = list(parse_file(p))
    texts = [u.text for u in units]
    assert "First para with bold text." in texts
    assert not any("hidden" in t for t in texts)
    item = next(u for u in units if u.text == "item two")
    assert item.heading_path == ("Top", "Sub") and item.line_start == 5
    assert "    y = 2" in texts


def test_unknown_extension_is_refused(tmp_path: Path):
    p = tmp_path / "data.xyz"
    p.write_text("hello")
    with pytest.raises(ParseError, match="unsupported file type"):
        list(parse_file(p))


def test_html_headings_drop_their_permalink_marks(tmp_path: Path):
    """Sphinx and the Go spec end each heading with a permalink anchor "¶": the stored heading (and so
    the citation "§ 3.6. Module Path") does not keep it."""
    html = """<html><body>
<h2 id="mod">3.6. Module Path<a class="headerlink" href="#mod" title="Link to this heading">¶</a></h2>
<p>The module path is declared in the go.mod file.</p>
<h3>C# interop <a href="#x">🔗</a></h3>
<p>Calls go through a bridge.</p>
</body></html>"""
    p = tmp_path / "spec.html"
    p.write_text(html)
    units = list(parse_file(p))
    heads = [u.text for u in units if u.kind == "heading"]
    assert heads == ["3.6. Module Path", "C# interop"]
    para = next(u for u in units if u.text.startswith("The module path"))
    assert para.heading_path == ("3.6. Module Path",)
    assert next(u for u in units if u.text.startswith("Calls")).heading_path == ("3.6. Module Path", "C# interop")
