"""Lexical retrieval (BM25 via bm25s) and reciprocal rank fusion with the dense ranking.

The BM25 index is a *derived cache* of the Chroma collection: it is rebuilt
from Chroma's stored chunk texts whenever the manifest's generation counter
has moved since it was built, and published atomically (new folder, then an
atomic pointer swap). So a crash can leave it stale, never wrong: the next
search rebuilds.

    from localrag.rag.retrieve import Bm25Store, rrf_fuse
    store = Bm25Store(Path("docs_index/bm25/default"))
    store.ensure(7, lambda: pairs_of_id_and_text)   # reuse, load from disk, or rebuild
    store.search("query words", n=50)      # [(chunk_id, score), ...]
"""

from __future__ import annotations

import json
import os
import shutil
import time
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path

import bm25s
import numpy as np
import Stemmer
from bm25s.tokenization import Tokenizer

STAMP = "localrag_stamp.json"


def english_stemmer():
    """The English Snowball stemmer (PyStemmer)."""
    return Stemmer.Stemmer("english")


class Bm25Store:
    """A bm25s index over one collection's chunks, persisted under ``directory``.

    Each build goes to a fresh sub-folder; a ``CURRENT`` file, replaced atomically, names
    the live one. So two processes (UI and CLI) rebuilding at once never corrupt it.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self._retriever = None
        self._ids: list[str] = []
        self._generation: int | None = None  # generation of the in-memory index
        self._stemmer = english_stemmer()

    @property
    def ids(self) -> tuple[str, ...]:
        """Chunk ids of the loaded index, in index order."""
        return tuple(self._ids)

    def _current(self) -> Path | None:
        try:
            name = (self.directory / "CURRENT").read_text().strip()
        except OSError:
            return None
        sub = self.directory / name
        return sub if (sub / STAMP).is_file() else None

    def disk_generation(self) -> int | None:
        sub = self._current()
        if sub is None:
            return None
        try:
            return int(json.loads((sub / STAMP).read_text())["generation"])
        except (OSError, ValueError, KeyError, json.JSONDecodeError):
            return None

    def ensure(self, generation: int, docs: Callable[[], Iterable[tuple[str, str]]]) -> None:
        """Make the in-memory index reflect ``generation``: reuse, load from disk, or rebuild."""
        if self._generation == generation:
            return
        if self.disk_generation() == generation:
            try:
                self._load()
                return
            except (OSError, ValueError):  # removed by a concurrent rebuild: build our own
                pass
        self.build(docs(), generation)

    def build(self, docs: Iterable[tuple[str, str]], generation: int) -> int:
        """Index (chunk_id, text) pairs; returns the number indexed. Token ids are kept as int32."""
        tokenizer = Tokenizer(stopwords="en", stemmer=self._stemmer)
        ids: list[str] = []
        token_ids: list[np.ndarray] = []
        batch: list[str] = []

        def drain() -> None:
            for doc in tokenizer.streaming_tokenize(batch, update_vocab=True):
                token_ids.append(np.asarray(doc, dtype=np.int32))
            batch.clear()

        for chunk_id, text in docs:
            ids.append(chunk_id)
            batch.append(text)
            if len(batch) >= 2048:
                drain()
        drain()
        self.directory.mkdir(parents=True, exist_ok=True)
        sub = self.directory / f"g{generation}-{uuid.uuid4().hex[:8]}"
        sub.mkdir()
        retriever = None
        if ids:
            retriever = bm25s.BM25()
            retriever.index((token_ids, tokenizer.get_vocab_dict()), show_progress=False)
            retriever.save(str(sub), show_progress=False)
        (sub / "ids.json").write_text(json.dumps(ids))
        (sub / STAMP).write_text(json.dumps({"generation": generation, "count": len(ids)}))
        pointer = self.directory / f"CURRENT.{uuid.uuid4().hex[:8]}"
        pointer.write_text(sub.name)
        os.replace(pointer, self.directory / "CURRENT")
        self._retriever, self._ids, self._generation = retriever, ids, generation
        self._prune(keep=sub.name)
        return len(ids)

    def _prune(self, keep: str) -> None:
        """Drop older builds (after a grace period, in case another process is loading one)."""
        cutoff = time.time() - 60
        for entry in self.directory.iterdir():
            if entry.name != keep and entry.is_dir() and entry.stat().st_mtime < cutoff:
                shutil.rmtree(entry, ignore_errors=True)

    def _load(self) -> None:
        sub = self._current()
        if sub is None:
            raise OSError("no BM25 index on disk")
        stamp = json.loads((sub / STAMP).read_text())
        ids = json.loads((sub / "ids.json").read_text())
        retriever = bm25s.BM25.load(str(sub), show_progress=False) if ids else None
        self._retriever, self._ids, self._generation = retriever, ids, int(stamp["generation"])

    def search(self, query: str, n: int) -> list[tuple[str, float]]:
        """Top ``n`` (chunk_id, bm25 score) with a positive score, best first."""
        if self._retriever is None or not self._ids:
            return []
        tokens = bm25s.tokenize(
            [query], stopwords="en", stemmer=self._stemmer, return_ids=False, show_progress=False
        )[0]
        tokens = [t for t in tokens if t in self._retriever.vocab_dict and t]
        if not tokens:
            return []
        scores = self._retriever.get_scores(tokens)
        n = min(n, len(scores))
        top = np.argpartition(-scores, n - 1)[:n]
        top = top[np.argsort(-scores[top], kind="stable")]
        return [(self._ids[i], float(scores[i])) for i in top if scores[i] > 0]


def rrf_fuse(rankings: list[list[str]], weights: list[float], k: int = 60) -> list[tuple[str, float]]:
    """Reciprocal rank fusion: score(d) = sum_i w_i / (k + rank_i(d)), ranks from 1.

    Equal scores (two documents each found by one ranking, at the same rank) go to the document
    of the earlier ranking: callers list the ranking they trust more on a tie first."""
    fused: dict[str, float] = {}
    first: dict[str, int] = {}  # the earliest ranking that lists each document
    for i, (ranking, w) in enumerate(zip(rankings, weights, strict=True)):
        for rank, doc in enumerate(ranking, start=1):
            fused[doc] = fused.get(doc, 0.0) + w / (k + rank)
            first.setdefault(doc, i)
    return sorted(fused.items(), key=lambda kv: (-kv[1], first[kv[0]], kv[0]))
