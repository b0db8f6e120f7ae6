"""Crash safety, for real: a child process ingests, the test SIGKILLs it mid-file, then checks
that nothing already indexed was lost, the next ingest resumes, and there are no orphan chunks
and no file marked done with missing chunks.

Run: .venv/bin/python -m pytest tests/rag/test_rag_crash.py -q
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from rag_docgen import SMALL_CHUNKS, assert_consistent, prose, write

from localrag.rag.config import IndexConfig
from localrag.rag.index import DocumentIndex

CHILD = textwrap.dedent("""
    import sys
    from localrag.rag.config import IndexConfig
    from localrag.rag.index import DocumentIndex
    idx = DocumentIndex(IndexConfig(index_dir=sys.argv[1], chunk_tokens=32, overlap_tokens=4))
    idx.ingest([sys.argv[2]], progress=lambda e: print(e.kind, e.chunks, e.path, flush=True))
    print("finished", flush=True)
""")
ROOT = Path(__file__).resolve().parents[2]


def _ingest_and_kill(index_dir: Path, docs: Path, big: Path, after_chunks: int) -> None:
    """Run an ingest in a child and SIGKILL it once ``big`` has ``after_chunks`` chunks written."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(index_dir), str(docs)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=env,
    )
    try:
        for line in child.stdout:
            kind, chunks, path = line.rstrip("\n").split(" ", 2) if " " in line else (line.strip(), "0", "")
            assert kind != "finished", "the child finished before it could be killed"
            if kind == "chunks" and path == str(big) and int(chunks) >= after_chunks:
                os.kill(child.pid, signal.SIGKILL)
                break
    finally:
        child.wait(timeout=60)
    assert child.returncode == -signal.SIGKILL


def _manifest_rows(index_dir: Path) -> tuple[set[str], int]:
    db = sqlite3.connect(index_dir / "manifest.sqlite")
    try:
        done = {r[0] for r in db.execute("SELECT path FROM files")}
        pending = db.execute("SELECT count(*) FROM pending").fetchone()[0]
    finally:
        db.close()
    return done, pending


@pytest.mark.slow
def test_sigkill_mid_ingest_then_resume(tmp_path, embedder):
    docs = tmp_path / "docs"
    small_a = [write(docs / f"a{i}.md", f"# Note {i}\n\n" + prose(120, seed=i)) for i in range(5)]
    # ~1,000 small chunks, written up to 256 at a time (see rag_docgen.SMALL_CHUNKS).
    big = write(docs / "m_big.txt", prose(24000, seed=99))
    for i in range(5):
        write(docs / f"z{i}.md", f"# Later {i}\n\n" + prose(120, seed=50 + i))
    index_dir = tmp_path / "index"

    # 1. Killed while the big file's chunks are being written.
    _ingest_and_kill(index_dir, docs, big, after_chunks=512)
    done, pending = _manifest_rows(index_dir)
    assert done == {str(p) for p in small_a} and pending == 1  # really killed mid-file

    idx = DocumentIndex(IndexConfig(index_dir=index_dir, **SMALL_CHUNKS), embedder=embedder)
    # Nothing committed was lost, and the half-written file is invisible to search.
    in_chroma = idx.store.ids(idx.space)
    for p in small_a:
        rec = idx.manifest.get("default", str(p))
        assert sum(cid.startswith(f"{rec.ver}:") for cid in in_chroma) == rec.n_chunks
    assert all(h.file != str(big) for h in idx.search(big.read_text()[:200], k=10))

    # 2. The next ingest resumes: done files skipped, the rest added, orphans gone.
    report = idx.ingest([docs])
    assert (report.skipped, report.added, report.failed) == (5, 6, [])
    assert_consistent(idx)
    n_big = idx.manifest.get("default", str(big)).n_chunks
    assert n_big > 600

    # 3. Killed while *replacing* an edited file: the old version stays whole and searchable.
    old_rec = idx.manifest.get("default", str(big))
    big.write_text(prose(24000, seed=7))
    idx.close()
    _ingest_and_kill(index_dir, docs, big, after_chunks=256)
    idx = DocumentIndex(IndexConfig(index_dir=index_dir, **SMALL_CHUNKS), embedder=embedder)
    rec = idx.manifest.get("default", str(big))
    assert rec == old_rec
    assert sum(cid.startswith(f"{rec.ver}:") for cid in idx.store.ids(idx.space)) == rec.n_chunks
    report = idx.ingest([docs])
    assert (report.replaced, report.skipped) == (1, 10)
    assert_consistent(idx)
    idx.close()
