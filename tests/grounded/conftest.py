"""Fixtures for the Speculative RAG / answer-layer tests: real bundled models, a real small index.

Run: HF_HUB_OFFLINE=1 .venv/bin/python -m pytest tests/grounded -q   (-m "not slow" for the fast subset)
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# llama.cpp's OpenMP threads spin while waiting; on a shared, oversubscribed CI box that made
# decoding ~10x slower (measured 1.4 vs 18.7 tok/s). Passive waiting costs nothing when idle.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

DOCS = {
    "contract.md": """# Service contract

## Termination

Either party may terminate this agreement with 30 days written notice. The client pays for
all work done up to the termination date.

## Payment

Invoices are due within 14 days of receipt. Late payments carry a 2% monthly fee.
""",
    "garden.txt": """Tomatoes need full sun and deep watering twice a week. Stake the plants early so the
stems do not snap.

Turn the compost heap every fortnight and keep it as damp as a wrung-out sponge.
""",
    "boat.txt": """The harbor master logs every ship that enters the port. The blue ferry Aurora leaves
for the island at seven in the morning and returns at six in the evening.
""",
}


@pytest.fixture(scope="session")
def corpus(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("specrag-docs")
    for name, text in DOCS.items():
        (root / name).write_text(text, encoding="utf-8")
    return root


@pytest.fixture(scope="session")
def index(corpus, tmp_path_factory):
    """A real DocumentIndex (Chroma + BM25 + MiniLM) over the three small documents."""
    from localrag.rag import DocumentIndex, IndexConfig

    idx = DocumentIndex(IndexConfig(index_dir=tmp_path_factory.mktemp("specrag-index"), collection="t",
                                    chunk_tokens=48, overlap_tokens=8))
    report = idx.ingest([corpus])
    assert not report.failed and report.chunks >= 4
    yield idx
    idx.close()


@pytest.fixture(scope="session")
def drafter():
    from localrag.config import ModelConfig
    from localrag.engine import Engine

    eng = Engine.load(ModelConfig(model="smollm2-135m-instruct", n_ctx=4096, n_threads=2))
    yield eng
    eng.close()


@pytest.fixture(scope="session")
def verifier():
    from localrag.config import ModelConfig
    from localrag.engine import Engine

    eng = Engine.load(ModelConfig(model="gemma3-270m", n_ctx=2048, n_batch=1024, n_threads=2))
    yield eng
    eng.close()
