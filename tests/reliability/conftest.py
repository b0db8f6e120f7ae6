"""Fixtures of the reliability suite: the real bundled MiniLM, real Chroma (local, and a real
``chroma run`` server that tests kill and restart), child processes that ingest.

Every scenario ends with the three-way consistency check (``rag_docgen.assert_consistent``):
manifest rows = Chroma ids = BM25 ids, no orphans, no pending or garbage rows.

Run: .venv/bin/python -m pytest tests/reliability -q
"""

from __future__ import annotations

import os

# (the offline and telemetry settings come from tests/conftest.py, loaded first)
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest  # noqa: E402
from harness import ChromaServer  # noqa: E402


@pytest.fixture(scope="session")
def embedder():
    from localrag.rag.config import IndexConfig
    from localrag.rag.embed import make_embedder

    cfg = IndexConfig()
    return make_embedder(cfg.model_path, cfg.embedding_backend)


@pytest.fixture
def chroma_server(tmp_path):
    server = ChromaServer(tmp_path / "chroma-server")
    server.start()
    yield server
    server.stop()
