"""Kill-at-random-points ingest: a child process ingests a folder that changes between rounds
(edits, deletions, additions, a big file replaced) and is SIGKILLed at a random moment while
a file's chunks are being written. After every kill, what is committed is whole and whatever
is not is tracked for deletion; the last ingest ends with the three-way consistency check.

Run: .venv/bin/python -m pytest tests/reliability/test_kill_ingest.py -q
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from harness import ROOT, child_env
from rag_docgen import SMALL_CHUNKS, assert_consistent, prose, write

from localrag.rag.config import IndexConfig
from localrag.rag.index import DocumentIndex

pytestmark = [pytest.mark.slow, pytest.mark.reliability]

CHILD = textwrap.dedent("""
    import sys
    from localrag.rag.config import IndexConfig
    from localrag.rag.index import DocumentIndex
    idx = DocumentIndex(IndexConfig(index_dir=sys.argv[1], chunk_tokens=32, overlap_tokens=4))
    idx.ingest([sys.argv[2]], progress=lambda e: print(e.kind, e.chunks, e.path, flush=True))
    print("finished", flush=True)
""")
ROUNDS = 5


def _small(docs: Path, n: int, marker: str) -> Path:
    return write(docs / f"note{n:02d}.md", f"# Note {n}\n\nThe marker of this note is {marker}.\n\n" + prose(40, seed=n))


def _kill_during_writes(index_dir: Path, docs: Path, rng: random.Random) -> bool:
    """Run an ingest in a child; SIGKILL it a random moment after a random batch of a big file
    was written (its version is then pending, with chunks in Chroma, more to come). Returns
    whether it was killed (it may finish first)."""
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(index_dir), str(docs)],
        stdout=subprocess.PIPE, text=True, cwd=ROOT, env=child_env(),
    )  # fmt: skip
    after = rng.randint(1, 2)  # the n-th batch of a big file ...
    delay = rng.uniform(0.0, 0.3)  # ... then a little more: inside the next batch's embedding or write
    seen = 0
    killed = False
    try:
        for line in child.stdout:
            if line.startswith("chunks ") and "m_big" in line:
                seen += 1
                if seen == after:
                    time.sleep(delay)
                    child.send_signal(signal.SIGKILL)
                    killed = True
                    break
    finally:
        child.wait(timeout=120)
    return killed and child.returncode == -signal.SIGKILL


def _check_after_kill(index_dir: Path, embedder) -> int:
    """Committed files are whole; every other chunk in Chroma belongs to a pending or garbage
    version (the next run deletes it). Returns how many pending versions had chunks written."""
    idx = DocumentIndex(IndexConfig(index_dir=index_dir, **SMALL_CHUNKS), embedder=embedder)
    try:
        by_ver: dict[str, int] = {}
        for cid in idx.store.ids(idx.space):
            ver = cid.split(":", 1)[0]
            by_ver[ver] = by_ver.get(ver, 0) + 1
        live = {rec.ver: rec for rec in idx.manifest.files("default")}
        for ver, rec in live.items():
            assert by_ver.get(ver, 0) == rec.n_chunks, f"{rec.path} committed with chunks missing"
        tracked = {v for v, _ in idx.manifest.pending()} | {v for v, _ in idx.manifest.garbage()}
        assert set(by_ver) <= set(live) | tracked, "untracked chunks in Chroma"
        return sum(1 for v, _ in idx.manifest.pending() if by_ver.get(v, 0) > 0)
    finally:
        idx.close()


def test_kill_at_random_points_then_resume(tmp_path, embedder):
    rng = random.Random(20)
    docs = tmp_path / "docs"
    index_dir = tmp_path / "index"
    markers = {n: f"zq{n:02d}a" for n in range(10)}
    for n, marker in markers.items():
        _small(docs, n, marker)
    write(docs / "m_big1.txt", prose(8000, seed=1))
    write(docs / "m_big2.txt", prose(8000, seed=2))

    killed, mid_file = 0, 0
    for round_no in range(ROUNDS):
        if _kill_during_writes(index_dir, docs, rng):
            killed += 1
            mid_file += _check_after_kill(index_dir, embedder) > 0
        # The folder changes between runs: an edit, a deletion, an addition, a big file replaced.
        edit = rng.choice(sorted(markers))
        markers[edit] = f"zq{edit:02d}r{round_no}"
        _small(docs, edit, markers[edit])
        gone = rng.choice(sorted(markers))
        (docs / f"note{gone:02d}.md").unlink()
        del markers[gone]
        new = 10 + round_no
        markers[new] = f"zq{new:02d}a"
        _small(docs, new, markers[new])
        write(docs / f"m_big{1 + round_no % 2}.txt", prose(8000, seed=10 + round_no))
    assert killed >= ROUNDS - 1 and mid_file >= 2, (killed, mid_file)

    idx = DocumentIndex(IndexConfig(index_dir=index_dir, **SMALL_CHUNKS), embedder=embedder)
    report = idx.ingest([docs])
    assert report.failed == []
    on_disk = {str(p) for p in docs.iterdir()}
    assert {d.path for d in idx.list_documents() if d.status == "indexed"} == on_disk
    for n, marker in markers.items():
        [hit] = idx.search(marker, k=1)
        assert hit.file == str(docs / f"note{n:02d}.md") and marker in hit.text
    assert_consistent(idx)
    idx.close()
