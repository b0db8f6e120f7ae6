"""Documents: parse, chunk, index (Chroma + BM25 + manifest) and hybrid retrieval.

    from localrag.rag import DocumentIndex, IndexConfig
    index = DocumentIndex(IndexConfig(collection="default"))
    index.ingest(["~/notes"]); index.search("question", k=5)
"""

from localrag.rag.config import IndexConfig
from localrag.rag.index import DocumentIndex
from localrag.rag.parse import ParseError
from localrag.rag.records import DocumentInfo, Hit, IngestEvent, IngestReport

__all__ = ["DocumentIndex", "DocumentInfo", "Hit", "IndexConfig", "IngestEvent", "IngestReport", "ParseError"]
