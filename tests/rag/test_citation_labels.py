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
