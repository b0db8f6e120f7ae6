"""Chroma's HTTP client mode: a real ``chroma run`` server, selected by a setting, same code path.

Run: .venv/bin/python -m pytest tests/rag/test_rag_http_mode.py -q
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rag_docgen import assert_consistent, write

from localrag.rag.config import IndexConfig
from localrag.rag.index import DocumentIndex


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_http_client_mode(tmp_path, embedder):
    chroma = shutil.which("chroma", path=str(Path(sys.executable).parent)) or shutil.which("chroma")
    assert chroma, "the chroma CLI ships with the chromadb package"
    port = _free_port()
    env = dict(os.environ, ANONYMIZED_TELEMETRY="False")
    server = subprocess.Popen(
        [chroma, "run", "--path", str(tmp_path / "server"), "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("localhost", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "chroma server did not start"
                assert server.poll() is None, "chroma server exited"
                time.sleep(0.2)
        cfg = IndexConfig(index_dir=tmp_path / "local", chroma_host="localhost", chroma_port=port)
        idx = DocumentIndex(cfg, embedder=embedder)
        doc = write(tmp_path / "docs" / "owls.md", "# Owls\n\nOwls can rotate their heads 270 degrees.\n")
        write(tmp_path / "docs" / "moss.txt", "Moss grows on the shaded side of stones.\n")
        report = idx.ingest([tmp_path / "docs"])
        assert (report.added, report.failed) == (2, [])
        hit = idx.search("how far can an owl turn its head", k=1)[0]
        assert hit.file == str(doc) and hit.citation() == "owls.md lines 1-3"
        doc.write_text("# Owls\n\nOwls fly silently thanks to fringed feathers.\n")
        assert idx.ingest([tmp_path / "docs"]).replaced == 1
        assert "silently" in idx.search("owl feathers", k=1)[0].text
        assert idx.remove(doc) == 1
        assert_consistent(idx)
        # Vectors live on the server; locally only the manifest and BM25 exist.
        assert not (tmp_path / "local" / "chroma").exists()
        assert any((tmp_path / "server").iterdir())
        idx.close()
    finally:
        server.terminate()
        server.wait(timeout=30)
