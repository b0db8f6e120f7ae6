"""Stopping an ingest: ``DocumentIndex.ingest(..., cancel=event)`` and Ctrl-C on ``python -m localrag
ingest``. A stopped run keeps what it committed, rolls the file in progress back as after a crash,
lists what it did not do, and the next run of the same folder does exactly the rest.

Run: .venv/bin/python -m pytest tests/rag/test_ingest_stop.py -q
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from rag_docgen import SMALL_CHUNKS, assert_consistent, prose, write

from localrag.rag.config import IndexConfig
from localrag.rag.index import DocumentIndex

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def _folder(docs: Path, n: int, words: int) -> list[Path]:
    return [write(docs / f"note{i:03d}.md", f"# Note {i}\n\nNote {i} is about {prose(words, seed=i)}\n")
            for i in range(n)]


def _indexed(idx) -> dict[str, str]:
    return {rec.path: rec.content_hash for rec in idx.manifest.files(idx.config.collection)}


def test_stopped_mid_folder_keeps_what_it_committed_and_the_next_run_does_the_rest(tmp_path, make_index):
    docs = tmp_path / "docs"
    files = _folder(docs, 200, 40)
    idx = make_index(**SMALL_CHUNKS)
    cancel = threading.Event()
    events = []

    def progress(event):
        events.append(event)
        if event.kind == "file_done" and event.files_done >= 60:
            cancel.set()

    report = idx.ingest([docs], progress, cancel=cancel)
    assert report.stopped and report.failed == []
    assert 60 <= report.added < 200 and report.seen == report.added
    assert sorted(report.not_done + list(_indexed(idx))) == sorted(str(f) for f in files)
    assert events[-1].kind == "done" and events[-1].status == "stopped" and events[-1].total == 200
    assert "stopped: " in report.summary() and report.to_dict()["not_done"] == report.not_done
    assert_consistent(idx)  # manifest = Chroma = BM25, nothing pending

    again = idx.ingest([docs])
    assert not again.stopped and again.not_done == []
    assert (again.added, again.skipped, again.removed) == (len(report.not_done), report.added, [])
    assert sorted(_indexed(idx)) == sorted(str(f) for f in files)
    assert_consistent(idx)
    # the last file, left to the second run, is found by its own words (the words "Note 199" alone rank
    # by the embedder's view of 200 notes that differ in one number, which differs between CPUs)
    words = (docs / "note199.md").read_text().splitlines()[2][:80]
    assert idx.search(words, k=3)[0].file == str(docs / "note199.md")


def test_the_file_being_written_is_rolled_back_and_keeps_its_old_version(tmp_path, make_index):
    """The stop comes after the first batch of a big edited file was written (its new version is
    pending with chunks in Chroma): those chunks go, the old version stays live and searchable."""
    docs = tmp_path / "docs"
    _folder(docs, 10, 30)
    big = write(docs / "note005_big.md", "# Big\n\nThe old big file mentions quartz harbor.\n\n" + prose(8000, seed=1))
    idx = make_index(**SMALL_CHUNKS)
    idx.ingest([docs])
    old = _indexed(idx)[str(big)]
    old_chunks = idx.manifest.files("default")
    write(big, "# Big\n\nThe new big file mentions velvet summit.\n\n" + prose(8000, seed=2))
    write(docs / "note009.md", "# Note 9\n\nEdited after the big one.\n")

    cancel = threading.Event()
    pending_seen = []

    def progress(event):
        if event.kind == "chunks" and event.path == str(big):
            pending_seen.append(idx.manifest.pending())
            cancel.set()  # the big file is open: some of its chunks written, more to come

    report = idx.ingest([docs], progress, cancel=cancel)
    assert pending_seen and pending_seen[0], "the stop did not come while the big file was half written"
    assert report.stopped and str(big) in report.not_done and str(docs / "note009.md") in report.not_done
    assert _indexed(idx)[str(big)] == old  # still the old version, whole
    assert {r.path: r.n_chunks for r in idx.manifest.files("default")} == {r.path: r.n_chunks for r in old_chunks}
    assert_consistent(idx)
    assert idx.search("old big file mentions quartz harbor", k=1)[0].file == str(big)

    again = idx.ingest([docs])
    assert (again.replaced, again.added, again.stopped) == (2, 0, False)
    assert _indexed(idx)[str(big)] != old
    assert_consistent(idx)


def test_a_run_cancelled_before_it_starts_does_nothing_and_says_so(tmp_path, make_index):
    docs = tmp_path / "docs"
    files = _folder(docs, 5, 20)
    idx = make_index(**SMALL_CHUNKS)
    cancel = threading.Event()
    cancel.set()
    report = idx.ingest([docs], cancel=cancel)
    assert report.stopped and report.seen == 0 and sorted(report.not_done) == sorted(str(f) for f in files)
    assert _indexed(idx) == {}
    sync = idx.sync(docs, cancel=cancel)
    assert sync.stopped and len(sync.not_done) == 5
    assert_consistent(idx)


def _committed(manifest: Path) -> int:
    if not manifest.exists():
        return 0
    try:
        with sqlite3.connect(str(manifest), timeout=5) as db:
            return db.execute("SELECT COUNT(*) FROM files").fetchone()[0]
    except sqlite3.OperationalError:  # the child has not created its tables yet
        return 0


def test_ctrl_c_on_the_cli_prints_the_partial_report_and_exits_130(tmp_path, embedder):
    docs = tmp_path / "docs"
    files = _folder(docs, 200, 300)
    index_dir = tmp_path / "index"
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    child = subprocess.Popen(
        [sys.executable, "-m", "localrag", "ingest", str(docs), "--index-dir", str(index_dir), "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 240
        while _committed(index_dir / "manifest.sqlite") == 0 and child.poll() is None:
            assert time.monotonic() < deadline, "the child committed nothing in 240 s"
            time.sleep(0.05)
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=240)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == 130, err
    assert "Traceback" not in err and "stopping after the current batch" in err
    assert "file(s) not done; run the same ingest again" in err
    report = json.loads(out)
    assert report["stopped"] and report["not_done"] and report["added"] >= 1
    assert report["added"] + len(report["not_done"]) == 200

    idx = DocumentIndex(IndexConfig(index_dir=index_dir), embedder=embedder)
    try:
        assert sorted(_indexed(idx)) == sorted(set(map(str, files)) - set(report["not_done"]))
        assert_consistent(idx)
        again = idx.ingest([docs])
        assert (again.added, again.skipped, again.stopped) == (len(report["not_done"]), report["added"], False)
        assert_consistent(idx)
    finally:
        idx.close()
