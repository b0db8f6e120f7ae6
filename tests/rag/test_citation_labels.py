"""Citation labels name what a reader of the file sees: a web page's heading, not its source lines."""

from __future__ import annotations

from pathlib import Path

PAGE = """<html><head><title>Tent manual</title></head><body>
<h1>Tent manual</h1>
<p>Thank you for buying the Ridgeline tent.</p>
<h2>Pitching the tent</h2>
<p>Lay the groundsheet flat, then thread the two long poles through the blue sleeves.</p>
<p>Peg the four corners before you tension the guy lines.</p>
</body></html>"""


def test_html_citations_give_the_heading(make_index, tmp_path: Path):
    page = tmp_path / "manual.html"
    page.write_text(PAGE)
    notes = tmp_path / "notes.md"
    notes.write_text("# Notes\n\nThe blue sleeves hold the long poles.\n")
    index = make_index()
    index.ingest([page, notes])
    hits = index.search("thread the long poles through the sleeves", k=5)
    html_hit = next(h for h in hits if h.file.endswith("manual.html"))
    assert html_hit.citation() == "manual.html § Pitching the tent"
    md_hit = next(h for h in hits if h.file.endswith("notes.md"))
    assert md_hit.citation().startswith("notes.md line")  # a Markdown source is what its reader reads


def test_a_heading_indexed_with_its_permalink_mark_is_cited_without_it():
    """Chunks indexed before the parser dropped the "¶" keep it in their heading path: the label drops it."""
    from localrag.rag.records import Hit

    hit = Hit("v1:0", "The module path is declared in go.mod.", "/d/spec.html", None, 4, 4,
              ("Modules", "3.6. Module Path¶"), 0.5, 1.0, 0.1)
    assert hit.citation() == "spec.html § 3.6. Module Path"
