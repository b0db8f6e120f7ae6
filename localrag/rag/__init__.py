"""Documents: parse, chunk, index (Chroma + BM25 + manifest) and hybrid retrieval.

    from localrag.rag import DocumentIndex, IndexConfig
    index = DocumentIndex(IndexConfig(collection="default"))
    index.ingest(["~/notes"]); index.search("question", k=5)

Names are imported lazily so ``import localrag.rag`` stays cheap (no Chroma or torch).
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "DocumentIndex": "localrag.rag.index",
    "IndexConfig": "localrag.rag.config",
    "Hit": "localrag.rag.records",
    "IngestReport": "localrag.rag.records",
    "IngestEvent": "localrag.rag.records",
    "DocumentInfo": "localrag.rag.records",
    "ParseError": "localrag.rag.parse",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'localrag.rag' has no attribute {name!r}")
