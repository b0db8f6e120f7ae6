"""Fixtures for the document-index tests: offline models, real Chroma in a temp folder.

Run: ``.venv/bin/python -m pytest tests/rag -q`` (add ``-m "not slow"`` for the fast subset).
"""

from __future__ import annotations

import os

# Set before anything imports transformers / huggingface_hub / chromadb: nothing may download.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def model_path() -> str:
    from localrag.rag.config import bundled_embedding_model

    return bundled_embedding_model()


@pytest.fixture(scope="session")
def embedder(model_path):
    """One loaded MiniLM (the default int8 ONNX backend) shared by every index in the session."""
    from localrag.rag.embed import make_embedder

    return make_embedder(model_path)


@pytest.fixture(scope="session")
def counter(model_path):
    from localrag.rag.chunk import TokenCounter

    return TokenCounter.from_model_dir(model_path)


@pytest.fixture
def make_index(tmp_path, embedder):
    """Factory: a DocumentIndex in this test's temp folder (config overrides as kwargs)."""
    from localrag.rag.config import IndexConfig
    from localrag.rag.index import DocumentIndex

    made = []

    def make(**overrides):
        overrides.setdefault("index_dir", tmp_path / "index")
        cfg = IndexConfig(**overrides)
        shared = cfg.embedding_model is None and cfg.embedding_backend == embedder.backend
        idx = DocumentIndex(cfg, embedder=embedder if shared else None)
        made.append(idx)
        return idx

    yield make
    for idx in made:
        idx.close()
