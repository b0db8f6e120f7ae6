"""Every collection's index in one index folder: one cache, one loaded embedding model.

    indexes = IndexSet(IndexConfig(index_dir="docs_index"))
    indexes.get("work").search("termination notice")     # made on first use, then kept
    indexes.get(None)                                     # the default collection
    indexes.collections()                                 # every collection the folder knows

The app, the modes and the API all reach indexes through one IndexSet, so a collection is opened
once per process and every index shares the embedder the first one loaded. ``factory`` replaces
how an index is made (tests use fakes).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from localrag.rag.config import IndexConfig
from localrag.rag.embed import Embedder
from localrag.rag.index import DocumentIndex


class IndexSet:
    def __init__(self, config: IndexConfig, factory: Callable[[str], DocumentIndex] | None = None) -> None:
        self.config = config
        self._factory = factory or self._open
        self._indexes: dict[str, DocumentIndex] = {}
        self._lock = threading.Lock()
        self._embedder: Embedder | None = None
        self._embed_lock = threading.Lock()
        self._warm = False

    @classmethod
    def of(cls, index: DocumentIndex) -> IndexSet:
        """A set of one index already open (benchmarks, tests): its collection is the default."""
        return cls(index.config, factory=lambda name: index)

    @property
    def default(self) -> str:
        return self.config.collection

    def get(self, collection: str | None = None) -> DocumentIndex:
        """The index of ``collection`` (None or blank: the default one), made on first use."""
        name = (collection or "").strip() or self.config.collection
        with self._lock:
            if name not in self._indexes:
                self._indexes[name] = self._factory(name)
            return self._indexes[name]

    def _open(self, collection: str) -> DocumentIndex:
        index = DocumentIndex(self.config.with_(collection=collection), embedder=self._embedder)
        self._embedder = index.embedder
        return index

    def embedder(self) -> Embedder:
        """The shared embedding model (the default collection's)."""
        return self.get(None).embedder

    def warm(self) -> None:
        """Load the embedding model once (an embed runs its first session); concurrent callers wait."""
        with self._embed_lock:
            if not self._warm:
                self.embedder().embed(["warm up"])
                self._warm = True

    def collections(self) -> list[str]:
        """The collections the folder knows, the ones opened here, and the default one."""
        return sorted(set(self.get(None).collections()) | set(self._indexes) | {self.config.collection})

    def opened(self) -> list[DocumentIndex]:
        with self._lock:
            return list(self._indexes.values())

    def close(self) -> None:
        for index in self.opened():
            index.close()
