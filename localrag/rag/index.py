"""The document index: Chroma (dense) + BM25 (lexical) + a crash-safe manifest, fused by RRF.

    from localrag.rag.index import DocumentIndex, IndexConfig
    index = DocumentIndex(IndexConfig(collection="work"))
    report = index.ingest(["~/papers", "notes.md"], progress=print)
    for hit in index.search("what is speculative decoding?", k=5):
        print(hit.citation(), hit.fused_score, hit.snippet())
    index.list_documents(); index.remove("notes.md"); index.collections()

Layout in ``config.index_dir``: ``chroma/`` (PersistentClient; not used when
``chroma_host`` selects a shared HTTP server), ``manifest.sqlite`` (see
:mod:`localrag.rag.manifest` for the crash-safety protocol), ``bm25/<space>/``.

A "space" is the Chroma collection actually holding vectors:
``<collection>-<hash of the embedding model>``. Changing the model therefore
never mixes vectors: the next ingest re-embeds every file of the collection
into the new space and the old space is dropped once nothing refers to it.
A chunk-settings change re-chunks files in place through the same
versioned replace. Writers take an exclusive file lock on the index folder (a
second writer says it is waiting, and who holds it).

Ingest (:mod:`localrag.rag.ingest`) is pipelined and reconciles the folders it is
given: files gone from them are removed (or kept and listed as missing). Chroma is
only used inside store sessions, which serialise processes sharing a folder and give
each one a client that reflects the others' writes (:mod:`localrag.rag.store`). With a Chroma server, anything wrong with the connection
is one :class:`StoreUnavailable` naming the server, and the manifest forgets chunks
only once the server confirms they are deleted.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from localrag.rag.chunk import Chunker, TokenCounter
from localrag.rag.config import IndexConfig
from localrag.rag.embed import Embedder, make_embedder
from localrag.rag.ingest import Build, IndexParts, IngestRun, collect_garbage, recover
from localrag.rag.manifest import Manifest
from localrag.rag.records import DocumentInfo, Hit, IngestEvent, IngestReport
from localrag.rag.retrieve import Bm25Store, rrf_fuse
from localrag.rag.store import READ_PAGE, ChromaStore, StoreUnavailable

__all__ = [
    "DocumentIndex",
    "DocumentInfo",
    "Hit",
    "IndexConfig",
    "IngestEvent",
    "IngestReport",
    "NeedsReindex",
    "StoreUnavailable",
]

Progress = Callable[[IngestEvent], None]


class NeedsReindex(RuntimeError):
    """The collection was embedded with another model; an ingest must re-embed it first."""


class DocumentIndex:
    """Ingest, search, list and remove documents of one named collection."""

    def __init__(self, config: IndexConfig | None = None, embedder: Embedder | None = None) -> None:
        """``embedder``: share one loaded model between indexes (it must match ``config``)."""
        self.config = config or IndexConfig()
        self.dir = Path(self.config.index_dir).expanduser()
        self.dir.mkdir(parents=True, exist_ok=True)
        self.manifest = Manifest(self.dir / "manifest.sqlite")
        cfg = self.config
        self.embedder = embedder or make_embedder(
            cfg.model_path, cfg.embedding_backend, cfg.embed_batch, cfg.embed_threads, cfg.device
        )
        if Path(self.embedder.model_path) != Path(cfg.model_path) or self.embedder.backend != cfg.embedding_backend:
            raise ValueError("the shared embedder was built for another model or backend than config says")
        self.emb_fp = self.embedder.fingerprint
        self.chunk_fp = self.config.chunk_fingerprint()
        self.space = f"{self.config.collection}-{hashlib.sha1(self.emb_fp.encode()).hexdigest()[:10]}"
        self.build = Build(self.space, self.emb_fp, self.chunk_fp)
        self.store = ChromaStore(self.config, self.dir, self.embedder, self.emb_fp)
        self._chunker: Chunker | None = None
        self._bm25: dict[str, Bm25Store] = {}

    # ------------------------------------------------------------ plumbing
    def _collection(self, space: str, create: bool = True):
        """The Chroma collection for ``space`` (None if it does not exist and ``create`` is False);
        use it inside ``self.store.session()``."""
        return self.store.collection(space, create)

    @property
    def chunker(self) -> Chunker:
        if self._chunker is None:
            counter = TokenCounter.from_model_dir(self.config.model_path)
            self._chunker = Chunker(counter, self.config.chunk_tokens, self.config.overlap_tokens)
        return self._chunker

    @contextmanager
    def _write_lock(self, progress: Progress | None = None) -> Iterator[None]:
        """One writer per index folder (CLI and UI may run side by side); a second one says it waits."""
        with open(self.dir / ".write.lock", "a+") as fh:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                fh.seek(0)
                holder = fh.read().strip() or "unknown"
                if progress is not None:
                    progress(
                        IngestEvent(
                            "waiting",
                            reason=f"another process (pid {holder}) is writing to this index; "
                            "waiting for it to finish",
                        )
                    )
                fcntl.flock(fh, fcntl.LOCK_EX)
            fh.seek(0)
            fh.truncate()
            fh.write(str(os.getpid()))
            fh.flush()
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def _drop_unused_spaces(self) -> None:
        """Remove Chroma collections of this collection's old embedding models once unreferenced."""
        self.store.drop_spaces(f"{self.config.collection}-", self.manifest.spaces_in_use() | {self.space})

    def _fresh(self, rec) -> bool:
        return self.build.fresh(rec)

    # ------------------------------------------------------------ ingest
    def ingest(
        self, paths: Iterable[str | os.PathLike], progress: Progress | None = None, *, keep_missing: bool = False
    ) -> IngestReport:
        """Index files and folders (recursively); files gone from a folder given here are removed
        (``keep_missing``: kept, listed as missing). Never raises for a bad file: see ``report.failed``.

        Raises StoreUnavailable when the Chroma server cannot be reached; its ``report`` attribute
        then holds what was done before (nothing half-done is visible: pending versions are
        deleted by the next run).
        """
        t0 = time.perf_counter()
        emit = progress or (lambda event: None)
        run: IngestRun | None = None
        with self._write_lock(emit):
            try:
                self.store.check()
                recover(self.manifest, self.store)
                run = IngestRun(self._parts(), emit, keep_missing)
                report = run.run(paths)
                self._drop_unused_spaces()
                self._ensure_bm25()
            except StoreUnavailable as exc:
                exc.report = run.report if run is not None else IngestReport()
                exc.report.seconds = time.perf_counter() - t0
                raise
        report.seconds = time.perf_counter() - t0
        emit(IngestEvent("done", total=report.seen, chunks=report.chunks, files_done=report.seen))
        return report

    def sync(
        self, folder: str | os.PathLike, progress: Progress | None = None, *, keep_missing: bool = False
    ) -> IngestReport:
        """Bring the index in line with a folder: new and edited files indexed, moved ones re-pathed,
        vanished ones removed (or kept as missing). The entry point for watching a folder."""
        if not os.path.isdir(os.path.expanduser(str(folder))):
            raise NotADirectoryError(f"not a folder: {folder}")
        return self.ingest([folder], progress, keep_missing=keep_missing)

    def _parts(self) -> IndexParts:
        return IndexParts(self.config, self.manifest, self.store, self.chunker, self.embedder, self.build)

    # ------------------------------------------------------------ BM25 sync
    def _bm25_store(self) -> Bm25Store:
        if self.space not in self._bm25:
            self._bm25[self.space] = Bm25Store(self.dir / "bm25" / self.space)
        return self._bm25[self.space]

    def _ensure_bm25(self) -> Bm25Store:
        """Bring BM25 up to the manifest's generation (rebuilt from Chroma when behind)."""
        store = self._bm25_store()
        store.ensure(self.manifest.generation(self.config.collection), self._live_texts)
        return store

    def _live_texts(self) -> list[tuple[str, str]]:
        """(chunk id, text) of every live chunk, read in one session (a consistent snapshot)."""
        live = self.manifest.live_versions(self.config.collection, self.space)
        pairs: list[tuple[str, str]] = []
        with self.store.session():
            col = self._collection(self.space, create=False)
            offset = 0
            while col is not None and live:
                page = col.get(include=["documents", "metadatas"], limit=READ_PAGE, offset=offset)
                if not page["ids"]:
                    break
                for cid, doc, meta in zip(page["ids"], page["documents"], page["metadatas"], strict=True):
                    if meta is not None and meta.get("ver") in live:
                        pairs.append((cid, doc))
                offset += len(page["ids"])
        return pairs

    # ------------------------------------------------------------ search
    def search(self, query: str, k: int = 5) -> list[Hit]:
        """Hybrid search: dense and BM25 candidates fused by reciprocal rank fusion.

        Raises StoreUnavailable (the Chroma server cannot be reached) and NeedsReindex (the
        collection was embedded with another model), never an empty answer instead.
        """
        dense, lexical = self.rank(query, max(self.config.candidates, k))
        fused = rrf_fuse(  # lexical first: on a tie, a chunk holding the query's words wins
            [[c for c, _ in lexical], [c for c, _ in dense]],
            [self.config.bm25_weight, self.config.dense_weight],
            self.config.rrf_k,
        )[:k]
        return self._hits(fused, dict(dense), dict(lexical))

    def rank(
        self, query: str, n: int, vector=None
    ) -> tuple[list[tuple[str, float]], list[tuple[str, float]]]:
        """The two raw rankings, (chunk_id, score) best first: dense (cosine) and BM25.

        ``vector``: the query's embedding if already computed (benchmarks embed queries in batches).
        """
        coll = self.config.collection
        live = self.manifest.live_versions(coll, self.space)
        if not live:
            stale = [r for r in self.manifest.files(coll) if r.emb_fp != self.emb_fp]
            if stale:
                raise NeedsReindex(
                    f"collection {coll!r} was embedded with {stale[0].emb_fp}; "
                    f"run ingest to re-embed it with {self.emb_fp}"
                )
        if not live or not query.strip():
            return [], []
        qvec = self.embedder.embed([query]) if vector is None else [vector]
        with self.store.session():
            col = self._collection(self.space, create=False)
            if col is None:
                return [], []
            count = col.count()
            res = col.query(
                query_embeddings=qvec, n_results=min(count, n * 2), include=["metadatas", "distances"]
            )
        # A vector without metadata (Chroma after a killed writer) is not a live chunk either.
        dense = [
            (cid, 1.0 - float(dist))
            for cid, meta, dist in zip(res["ids"][0], res["metadatas"][0], res["distances"][0], strict=True)
            if meta is not None and meta.get("ver") in live
        ][:n]
        lexical = [
            (cid, s) for cid, s in self._ensure_bm25().search(query, n * 2) if cid.split(":", 1)[0] in live
        ][:n]
        return dense, lexical

    def _hits(self, fused: list[tuple[str, float]], dense: dict, lexical: dict) -> list[Hit]:
        if not fused:
            return []
        with self.store.session():
            col = self._collection(self.space, create=False)
            got = col.get(ids=[c for c, _ in fused], include=["documents", "metadatas"])
        by_id = {
            cid: (doc, meta)
            for cid, doc, meta in zip(got["ids"], got["documents"], got["metadatas"], strict=True)
        }
        live = self.manifest.live_versions(self.config.collection, self.space)
        hits = []
        for cid, score in fused:
            if cid not in by_id:
                continue
            doc, meta = by_id[cid]
            hits.append(
                Hit(
                    chunk_id=cid,
                    text=doc,
                    file=live.get(meta["ver"], meta["file"]),
                    page=meta.get("page"),
                    line_start=meta.get("line_start"),
                    line_end=meta.get("line_end"),
                    heading_path=tuple(json.loads(meta.get("heading_path", "[]"))),
                    ocr=bool(meta.get("ocr", False)),
                    dense_score=dense.get(cid),
                    bm25_score=lexical.get(cid),
                    fused_score=score,
                )
            )
        return hits

    def vectors(self, chunk_ids: Sequence[str]) -> np.ndarray:
        """(n, dim) stored embeddings of these chunks, in order (read back, not recomputed)."""
        if not chunk_ids:
            return np.zeros((0, self.embedder.dimension), dtype=np.float32)
        with self.store.session():
            col = self._collection(self.space, create=False)
            got = col.get(ids=list(chunk_ids), include=["embeddings"])
        by_id = dict(zip(got["ids"], got["embeddings"], strict=True))
        missing = [c for c in chunk_ids if c not in by_id]
        if missing:
            raise KeyError(f"chunks not in the index: {missing[:3]}")
        return np.asarray([by_id[c] for c in chunk_ids], dtype=np.float32)

    # ------------------------------------------------------------ documents
    def list_documents(self) -> list[DocumentInfo]:
        """Every document of the collection: indexed, stale, missing, or failed with its reason."""
        coll = self.config.collection
        failures = self.manifest.failures(coll)
        docs = []
        for rec in self.manifest.files(coll):
            if rec.path in failures:  # its last ingest failed: that, not the old version, is the news
                continue
            status = "indexed" if self._fresh(rec) else "stale"
            if not os.path.lexists(rec.path):
                status = "missing"
            docs.append(
                DocumentInfo(
                    rec.path, rec.n_chunks, status, rec.content_hash, rec.size, indexed_at=rec.indexed_at
                )
            )
        docs += [DocumentInfo(p, 0, "failed", reason=r) for p, r in failures.items()]
        return sorted(docs, key=lambda d: d.path)

    def remove(self, path: str | os.PathLike, progress: Progress | None = None) -> int:
        """Remove a document, or every document (and failure entry) under a folder; returns how
        many documents were removed. Raises StoreUnavailable, before changing anything, when the
        Chroma server cannot be reached."""
        target = os.path.abspath(os.path.expanduser(str(path)))
        coll = self.config.collection
        under = target.rstrip(os.sep) + os.sep
        with self._write_lock(progress):
            self.store.check()
            recover(self.manifest, self.store)
            paths = [r.path for r in self.manifest.files(coll) if r.path == target or r.path.startswith(under)]
            paths += [p for p in self.manifest.failures(coll) if p == target or p.startswith(under)]
            removed, _ = self.manifest.remove(coll, paths)
            collect_garbage(self.manifest, self.store)
            self._drop_unused_spaces()
        return len(removed)

    def collections(self) -> list[str]:
        return self.manifest.collections()

    def chunk_count(self) -> int:
        """Chunks physically in this collection's Chroma space (all versions)."""
        with self.store.session():
            col = self._collection(self.space, create=False)
            return 0 if col is None else col.count()

    def close(self) -> None:
        self.manifest.close()
        self.store.close()
