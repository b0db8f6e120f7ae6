"""The document CLI as a user runs it (``python -m localrag ...`` in a subprocess), including
the progress bar on a terminal, and a check that Chroma's default model downloader never ran.

Run: .venv/bin/python -m pytest tests/rag/test_rag_cli.py -q
"""

from __future__ import annotations

import fcntl
import json
import os
import pty
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest
from rag_docgen import write

ROOT = Path(__file__).resolve().parents[2]


def _run(args: list[str], home: Path, tty: bool = False) -> subprocess.CompletedProcess:
    # A fresh HOME: Chroma's default embedder would download into ~/.cache/chroma; it must never appear.
    env = dict(os.environ, HOME=str(home), PYTHONPATH=str(ROOT))
    cmd = [sys.executable, "-m", "localrag", *args]
    if not tty:
        return subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    master, slave = pty.openpty()
    # A real terminal has a size; tqdm sizes its bar from it.
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))
    try:
        proc = subprocess.run(
            cmd, stdout=subprocess.PIPE, stderr=slave, text=True, env=env, cwd=ROOT, timeout=300
        )
        os.close(slave)
        chunks = []
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:
                break
            if not data:
                break
            chunks.append(data)
        proc.stderr = b"".join(chunks).decode(errors="replace")
        return proc
    finally:
        os.close(master)


@pytest.mark.slow
def test_cli_ingest_search_list_remove(tmp_path):
    docs = tmp_path / "docs"
    write(docs / "océan notes.md", "# Tides\n\nSpring tides happen at new and full moon.\n")
    write(docs / "b.txt", "Bees communicate by dancing.\n")
    write(docs / "bad.xyz", "unknown\n")
    home = tmp_path / "home"
    home.mkdir()
    idx = ["--index-dir", str(tmp_path / "index")]

    out = _run(["ingest", str(docs), "--collection", "sea", "--json", *idx], home)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert {k: report[k] for k in ("seen", "added", "skipped", "replaced")} == {
        "seen": 3,
        "added": 2,
        "skipped": 0,
        "replaced": 0,
    }
    assert report["failed"] == [{"path": str(docs / "bad.xyz"), "reason": report["failed"][0]["reason"]}]
    assert "unsupported file type" in report["failed"][0]["reason"]
    assert report["chunks"] == 2 and report["seconds"] > 0

    out = _run(["search", "when are spring tides", "--k", "2", "--collection", "sea", "--json", *idx], home)
    hits = json.loads(out.stdout)
    assert hits[0]["file"] == str(docs / "océan notes.md")
    assert hits[0]["citation"] == "océan notes.md lines 1-3"
    assert {"dense_score", "bm25_score", "fused_score", "text", "page", "line_start"} <= set(hits[0])

    out = _run(["search", "when are spring tides", "--collection", "sea", *idx], home)
    assert "1. océan notes.md lines 1-3  [Tides]" in out.stdout and "fused=" in out.stdout

    out = _run(["docs", "list", "--collection", "sea", *idx], home)
    assert "indexed" in out.stdout and "failed" in out.stdout and "b.txt" in out.stdout

    out = _run(["docs", "remove", str(docs / "b.txt"), "--collection", "sea", *idx], home)
    assert out.returncode == 0 and "removed 1" in out.stdout
    # On a terminal the ingest shows a tqdm progress bar (on stderr) and a plain summary;
    # b.txt counts as added again, so the removal above really dropped it from the manifest.
    write(docs / "c.md", "Crows remember faces.\n")
    out = _run(["ingest", str(docs), "--collection", "sea", *idx], home, tty=True)
    assert "ingest:" in out.stderr and "file" in out.stderr and "%" in out.stderr
    assert out.stdout.startswith("seen 4, added 2, skipped 1")

    assert not (home / ".cache" / "chroma").exists()
