"""HTTP mode with a real ``chroma run`` server that is SIGKILLed mid-ingest and mid-remove, then
restarted: the CLI ends in one line naming the server (no traceback), nothing is forgotten
before the server confirms its deletion, and after the restart the next run leaves no orphan.
Ends with the three-way consistency check.

Run: .venv/bin/python -m pytest tests/reliability/test_server_restart.py -q
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from harness import ROOT, child_env
from rag_docgen import assert_consistent, prose, write

from localrag.rag.config import IndexConfig
from localrag.rag.index import DocumentIndex
from localrag.rag.store import StoreUnavailable

pytestmark = [pytest.mark.slow, pytest.mark.reliability]


def _corpus(docs: Path) -> None:
    for i in range(6):
        write(docs / f"a{i}.md", f"# Note {i}\n\nThe code word of note {i} is qv{i}x.\n\n" + prose(60, seed=i))
    write(docs / "m_big.txt", prose(40000, seed=3))  # ~200 chunks: the server dies while they are written
    for i in range(4):
        write(docs / f"z{i}.md", f"# Later {i}\n\nThe code word of later note {i} is qw{i}x.\n")


def _cli(server, index_dir: Path, *args: str, wait: bool = True):
    env = child_env(LOCALRAG_CHROMA_HOST="127.0.0.1", LOCALRAG_CHROMA_PORT=str(server.port))
    cmd = [sys.executable, "-m", "localrag", *args, "--index-dir", str(index_dir)]
    if not wait:
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env)
    return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)


def _manifest_counts(index_dir: Path) -> tuple[int, int, int]:
    """(files, pending, garbage) rows of the manifest; zeros before the child has created it."""
    if not (index_dir / "manifest.sqlite").exists():
        return 0, 0, 0
    db = sqlite3.connect(index_dir / "manifest.sqlite", timeout=30)
    try:
        return tuple(db.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in ("files", "pending", "garbage"))
    except sqlite3.OperationalError:  # the schema is not there yet
        return 0, 0, 0
    finally:
        db.close()


def _assert_one_line_error(out, server) -> None:
    assert out.returncode == 2, (out.returncode, out.stderr)
    assert "Traceback" not in out.stderr
    [line] = [ln for ln in out.stderr.splitlines() if ln.startswith("error: ")]
    assert f"Chroma server at http://127.0.0.1:{server.port} is unreachable" in line


def test_server_killed_mid_ingest_and_mid_remove(tmp_path, chroma_server, embedder):
    docs, index_dir = tmp_path / "docs", tmp_path / "local"
    _corpus(docs)

    # 1. The server dies while the big file's chunks are being written.
    child = _cli(chroma_server, index_dir, "ingest", str(docs), "--json", wait=False)
    deadline = time.monotonic() + 240
    while True:
        assert child.poll() is None, "the ingest finished before the server could be killed"
        assert time.monotonic() < deadline, "the big file was never reached"
        files, pending, _ = _manifest_counts(index_dir)
        if files >= 6 and pending >= 1:
            time.sleep(0.3)  # inside the big file's batches
            chroma_server.kill()
            break
        time.sleep(0.05)
    out, err = child.communicate(timeout=120)
    _assert_one_line_error(subprocess.CompletedProcess(child.args, child.returncode, out, err), chroma_server)
    partial = json.loads(out)  # the summary of what was done before the server went away
    assert partial["added"] >= 6 and partial["added"] < 11
    files, pending, _ = _manifest_counts(index_dir)
    assert pending >= 1 and files == partial["added"]  # the half-written file is still owed a cleanup

    # With the server down, every command says so in one line, and changes nothing.
    _assert_one_line_error(_cli(chroma_server, index_dir, "search", "code word"), chroma_server)
    _assert_one_line_error(_cli(chroma_server, index_dir, "docs", "remove", str(docs / "a0.md")), chroma_server)
    _assert_one_line_error(_cli(chroma_server, index_dir, "ingest", str(docs)), chroma_server)
    assert _manifest_counts(index_dir) == (files, pending, 0)

    # 2. Restarted: the next ingest deletes the half-written version and finishes the rest.
    chroma_server.start()
    cfg = IndexConfig(index_dir=index_dir, chroma_host="127.0.0.1", chroma_port=chroma_server.port)
    idx = DocumentIndex(cfg, embedder=embedder)
    report = idx.ingest([docs])
    assert report.failed == [] and report.skipped == partial["added"] and report.added == 11 - partial["added"]
    assert_consistent(idx)
    assert idx.search("qw3x", k=1)[0].file == str(docs / "z3.md")

    # 3. The server dies in the middle of removing a folder: the versions not yet deleted stay
    #    queued as garbage (never forgotten), and the next run deletes them.
    deleted = []
    real_delete = idx.store.delete_version

    def delete_then_die(space: str, ver: str) -> None:
        real_delete(space, ver)
        deleted.append(ver)
        if len(deleted) == 3:
            chroma_server.kill()

    idx.store.delete_version = delete_then_die
    with pytest.raises(StoreUnavailable, match=f"http://127.0.0.1:{chroma_server.port} is unreachable"):
        idx.remove(docs)
    idx.store.delete_version = real_delete
    files, pending, garbage = _manifest_counts(index_dir)
    assert (files, pending, garbage) == (0, 0, 11 - 3)
    assert idx.list_documents() == []
    chroma_server.start()
    assert idx.remove(docs) == 0  # nothing left to remove, but the queued deletions are done
    assert _manifest_counts(index_dir) == (0, 0, 0)
    assert_consistent(idx)
    assert idx.chunk_count() == 0

    # 4. And the folder can be ingested again from scratch.
    assert idx.ingest([docs]).added == 11
    assert_consistent(idx)
    idx.close()
