"""What the index shows stays true to the files: emptied, deleted, moved and failing files,
folder removal, another process's writes, and a second writer waiting. Real Chroma, real
MiniLM, real files; every test ends with the three-way consistency check.

Run: .venv/bin/python -m pytest tests/rag/test_rag_consistency.py -q
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
from rag_docgen import assert_consistent, write

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    docs = tmp_path / "docs"
    write(docs / "D.txt", "Dormice hibernate for up to seven months each year.\n")
    write(docs / "keep.md", "# Kelp\n\nKelp forests grow half a metre a day.\n")
    write(docs / "sub" / "gone.txt", "Gannets dive into the sea at sixty miles an hour.\n")
    return docs


def _files(idx) -> dict[str, str]:
    return {Path(d.path).name: d.status for d in idx.list_documents()}


def test_emptied_file_removes_its_old_chunks(make_index, folder):
    idx = make_index()
    assert idx.ingest([folder]).added == 3
    (folder / "D.txt").write_bytes(b"")  # `: > D.txt`
    report = idx.ingest([folder])
    assert report.failed == [(str(folder / "D.txt"), "empty file")]
    doc = next(d for d in idx.list_documents() if d.path == str(folder / "D.txt"))
    assert (doc.status, doc.chunks, doc.reason) == ("failed", 0, "empty file")
    assert all(h.file != str(folder / "D.txt") for h in idx.search("dormice hibernate", k=5))
    assert_consistent(idx)


def test_a_file_that_turns_corrupt_drops_its_old_content(make_index, folder):
    idx = make_index()
    idx.ingest([folder])
    (folder / "D.txt").write_bytes(bytes(range(256)) * 8)
    assert idx.ingest([folder]).failed[0][1].startswith("binary content")
    assert "Dormice" not in " ".join(h.text for h in idx.search("dormice hibernate", k=5))
    assert_consistent(idx)


def test_ingest_of_a_folder_removes_what_vanished_from_it(make_index, folder):
    idx = make_index()
    idx.ingest([folder])
    (folder / "sub" / "gone.txt").unlink()
    report = idx.ingest([folder])
    assert report.removed == [str(folder / "sub" / "gone.txt")]
    assert (report.skipped, report.failed) == (2, [])
    assert "gone.txt" not in _files(idx)
    assert all("Gannets" not in h.text for h in idx.search("gannets dive into the sea", k=5))
    assert_consistent(idx)


def test_a_folder_that_holds_the_index_ingests_its_documents_not_the_index(make_index, folder):
    """The index kept inside the folder being ingested: its database files are neither indexed nor
    failed, again and again; a walk that starts inside the index folder still looks at its files."""
    idx = make_index(index_dir=folder / "localrag-index")
    for _ in range(2):
        report = idx.ingest([folder])
        assert report.failed == [] and sorted(_files(idx)) == ["D.txt", "gone.txt", "keep.md"]
    assert any((folder / "localrag-index").rglob("*.sqlite3"))  # there was something to skip
    write(folder / "localrag-index" / "notes" / "n.txt", "Narwhals have a single long tusk.\n")
    assert idx.ingest([folder / "localrag-index" / "notes"]).added == 1
    assert_consistent(idx)


def test_ingest_of_a_vanished_subfolder_or_file_path_removes_it(make_index, folder):
    idx = make_index()
    idx.ingest([folder])
    shutil.rmtree(folder / "sub")
    report = idx.ingest([folder / "sub"])  # the folder itself is gone
    assert report.removed == [str(folder / "sub" / "gone.txt")] and report.failed == []
    (folder / "D.txt").unlink()
    report = idx.ingest([folder / "D.txt"])
    assert report.removed == [str(folder / "D.txt")] and report.failed == []
    assert set(_files(idx)) == {"keep.md"}
    assert_consistent(idx)


def test_keep_missing_keeps_and_marks_them(make_index, folder):
    idx = make_index()
    idx.ingest([folder])
    (folder / "sub" / "gone.txt").unlink()
    report = idx.ingest([folder], keep_missing=True)
    assert report.missing == [str(folder / "sub" / "gone.txt")] and report.removed == []
    assert _files(idx)["gone.txt"] == "missing"
    assert "kept missing 1" in report.summary()
    assert idx.ingest([folder]).removed == [str(folder / "sub" / "gone.txt")]
    assert_consistent(idx)


def test_a_move_inside_the_folder_is_not_a_removal(make_index, folder):
    idx = make_index()
    idx.ingest([folder])
    shutil.move(folder / "sub" / "gone.txt", folder / "moved.txt")
    report = idx.ingest([folder])
    assert (report.moved, report.removed, report.added) == (1, [], 0)
    assert idx.search("gannets dive", k=1)[0].file == str(folder / "moved.txt")
    assert_consistent(idx)


def test_failures_of_a_vanished_file_are_forgotten(make_index, folder):
    idx = make_index()
    write(folder / "bad.xyz", "unknown format\n")
    idx.ingest([folder])
    assert _files(idx)["bad.xyz"] == "failed"
    (folder / "bad.xyz").unlink()
    idx.ingest([folder])
    assert "bad.xyz" not in _files(idx)


def test_sync_is_ingest_of_one_folder(make_index, folder):
    idx = make_index()
    assert idx.sync(folder).added == 3
    (folder / "keep.md").unlink()
    write(folder / "new.txt", "Narwhal tusks are teeth.\n")
    report = idx.sync(folder)
    assert (report.added, report.removed) == (1, [str(folder / "keep.md")])
    with pytest.raises(NotADirectoryError):
        idx.sync(folder / "new.txt")
    assert_consistent(idx)


def test_docs_remove_of_a_folder_clears_its_failed_entries(make_index, folder):
    idx = make_index()
    write(folder / "sub" / "bad.xyz", "unknown format\n")
    (folder / "sub" / "empty.txt").write_bytes(b"")
    idx.ingest([folder])
    assert {"bad.xyz", "empty.txt", "gone.txt"} <= set(_files(idx))
    assert idx.remove(folder / "sub") == 1
    assert set(_files(idx)) == {"D.txt", "keep.md"}
    assert_consistent(idx)


def test_symlink_loop_is_reported_as_such(make_index, folder):
    os.symlink(folder / "loop.md", folder / "loop.md")
    report = make_index().ingest([folder])
    [(path, reason)] = report.failed
    assert path == str(folder / "loop.md") and reason.startswith("symlink loop")


def test_file_over_the_size_cap_is_refused_with_the_reason(make_index, folder):
    with open(folder / "huge.txt", "wb") as fh:
        fh.truncate(3 * 2**20)  # sparse: the cap refuses it before anything reads it
    report = make_index(max_file_mb=2).ingest([folder])
    [(path, reason)] = report.failed
    assert path.endswith("huge.txt") and "over the per-file limit of 2 MB" in reason
    assert report.added == 3


def test_one_thread_ingest_matches_the_pipelined_one(make_index, tmp_path, folder):
    write(folder / "long.txt", "\n\n".join(f"Paragraph {i} about harbour tides and copper kettles." for i in range(300)))
    piped = make_index(index_dir=tmp_path / "piped")
    inline = make_index(index_dir=tmp_path / "inline", parse_worker=False)
    a, b = piped.ingest([folder]), inline.ingest([folder])
    assert (a.added, a.chunks, a.failed) == (b.added, b.chunks, b.failed) == (4, a.chunks, [])
    counts = [{Path(r.path).name: r.n_chunks for r in i.manifest.files("default")} for i in (piped, inline)]
    assert counts[0] == counts[1]
    assert_consistent(piped)
    assert_consistent(inline)


SEARCHER = textwrap.dedent("""
    import sys
    from localrag.rag.config import IndexConfig
    from localrag.rag.index import DocumentIndex
    idx = DocumentIndex(IndexConfig(index_dir=sys.argv[1]))
    print(idx.ingest([sys.argv[2]]).added, flush=True)
""")


@pytest.mark.slow
def test_a_long_lived_searcher_sees_vectors_another_process_added(make_index, tmp_path):
    """The app and the CLI side by side: the dense ranking (not only BM25) finds the new file."""
    idx = make_index()
    idx.ingest([write(tmp_path / "a.txt", "Alpacas have soft and warm wool.\n")])
    assert idx.rank("alpaca wool", 5)[0]  # searched once: its dense index is loaded
    new = write(tmp_path / "b.txt", "Basalt columns form when lava cools slowly.\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run(
        [sys.executable, "-c", SEARCHER, str(idx.dir), str(new)],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=300,
    )  # fmt: skip
    assert out.stdout.strip() == "1", out.stderr
    dense, _ = idx.rank("basalt lava columns", 5)
    ver = idx.manifest.get("default", str(new)).ver
    assert dense[0][0] == f"{ver}:0"
    assert idx.search("basalt lava columns", k=1)[0].file == str(new)
    assert_consistent(idx)


def test_a_second_writer_says_it_is_waiting(make_index, folder):
    first, second = make_index(), make_index()
    events = []
    with first.write_lock():
        worker = threading.Thread(target=lambda: second.ingest([folder], progress=events.append))
        worker.start()
        worker.join(timeout=3)
        assert worker.is_alive()  # really blocked on the lock
        waiting = [e for e in events if e.kind == "waiting"]
        assert waiting and f"pid {os.getpid()}" in waiting[0].reason
    worker.join(timeout=300)
    assert events[-1].kind == "done"
    assert_consistent(second)
