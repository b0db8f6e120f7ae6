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
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from localrag.rag.chunk import Chunker, TokenCounter
from localrag.rag.config import IndexConfig
from localrag.rag.embed import Embedder, make_embedder
from localrag.rag.ingest import Build, IndexParts, IngestRun, collect_garbage, recover
from localrag.rag.manifest import Manifest
from localrag.rag.records import DocumentInfo, Hit, IngestEvent, IngestReport, WatchedFolder
from localrag.rag.retrieve import Bm25Store, rrf_fuse
from localrag.rag.store import READ_PAGE, ChromaStore, StoreUnavailable
from localrag.rag.targets import under
from localrag.rag.vectors import heal, repair_graph

__all__ = [
    "DocumentIndex",
    "DocumentInfo",
    "Hit",
    "IndexConfig",
    "IngestEvent",
    "IngestReport",
    "NeedsReindex",
    "StoreUnavailable",
    "WatchedFolder",
]

Progress = Callable[[IngestEvent], None]
SWEEP_SHARE = 0.05  # sweep the vector graph after writing this share of a space's chunks (see _sweep_due)


def _absolute(path: str | os.PathLike) -> str:
    return os.path.abspath(os.path.expanduser(str(path)))


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
        self.store = ChromaStore(self.config, self.dir, self.embedder, self.emb_fp, on_damaged=self.manifest.mark_damaged)
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
    def write_lock(self, progress: Progress | None = None) -> Iterator[None]:
        """One writer per index folder (CLI and UI may run side by side); a second one says it waits."""
        with open(self.dir / ".write.lock", "a+") as fh:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                fh.seek(0)
                holder = fh.read().strip() or "unknown"
                who = "another ingest of this process" if holder == str(os.getpid()) else "another process"
                if progress is not None:
                    progress(
                        IngestEvent(
                            "waiting",
                            reason=f"{who} (pid {holder}) holds the write lock of this index; "
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

    # ------------------------------------------------------------ after a crash
    def _recover(self, emit: Progress) -> list[str]:
        """Before writing (the write lock held): heal the vector index (a rebuild a crash cut short,
        a damaged one), delete what a dead writer left, and if one did, sweep the graph for
        vectors no query reaches (``localrag.rag.vectors``). Returns what was repaired."""
        say = self._say(emit)
        repaired = heal(self.store, self.manifest, self.space, self.embedder, say)
        if recover(self.manifest, self.store):
            repaired += self._repair_graph(emit)
        return repaired

    def _sweep_due(self) -> bool:
        """Sweep after writing once the chunks written since the last sweep are SWEEP_SHARE of the
        space: HNSW cuts nodes off as later nodes arrive, crash or not."""
        written = self.manifest.space_state(self.space).written
        return written > 0 and written >= SWEEP_SHARE * self.chunk_count()

    def _repair_graph(self, emit: Progress) -> list[str]:
        _, done = repair_graph(self.store, self.manifest, self.space, self.embedder, self._say(emit))
        return done

    @staticmethod
    def _say(emit: Progress):
        return lambda line: emit(IngestEvent("repair", reason=line))

    def _drop_unused_spaces(self) -> None:
        """Remove Chroma collections of this collection's old embedding models once unreferenced."""
        self.store.drop_spaces(f"{self.config.collection}-", self.manifest.spaces_in_use() | {self.space})

    def _fresh(self, rec) -> bool:
        return self.build.fresh(rec)

    # ------------------------------------------------------------ ingest
    def ingest(
        self,
        paths: Iterable[str | os.PathLike],
        progress: Progress | None = None,
        *,
        keep_missing: bool = False,
        cancel: threading.Event | None = None,
    ) -> IngestReport:
        """Index files and folders (recursively); files gone from a folder given here are removed
        (``keep_missing``: kept, listed as missing). Never raises for a bad file: see ``report.failed``.

        ``cancel`` set (from any thread) stops the run at its next batch boundary: files committed
        so far stay, the file being written is rolled back as after a crash (an edited file keeps
        its old version), nothing is reconciled, and the report says ``stopped`` and lists
        ``not_done``; the next ingest of the same paths does the rest. ``progress`` may also raise
        to stop the run: the same clean-up, and its exception propagates.

        Raises StoreUnavailable when the Chroma server cannot be reached; its ``report`` attribute
        then holds what was done before (nothing half-done is visible: pending versions are
        deleted by the next run).
        """
        t0 = time.perf_counter()
        emit = progress or (lambda event: None)
        run: IngestRun | None = None
        with self.write_lock(emit):
            try:
                self.store.check()
                repaired = self._recover(emit)
                run = IngestRun(self._parts(), emit, keep_missing, cancel)
                report = run.run(paths)
                report.repaired = repaired
                self.manifest.note_written(self.space, report.chunks)
                self._drop_unused_spaces()
                if self._sweep_due():  # a stopped run too: what it committed is searched from now on
                    report.repaired += self._repair_graph(emit)
                self._ensure_bm25()
            except StoreUnavailable as exc:
                exc.report = run.report if run is not None else IngestReport()
                exc.report.seconds = time.perf_counter() - t0
                raise
        report.seconds = time.perf_counter() - t0
        emit(IngestEvent("done", total=report.seen + len(report.not_done), status="stopped" if report.stopped else "",
                         chunks=report.chunks, files_done=report.seen))
        return report

    def sync(
        self,
        folder: str | os.PathLike,
        progress: Progress | None = None,
        *,
        keep_missing: bool = False,
        changed: Iterable[str | os.PathLike] | None = None,
        cancel: threading.Event | None = None,
    ) -> IngestReport:
        """Bring the index in line with a folder: new and edited files indexed, moved ones re-pathed,
        vanished ones removed (or kept as missing). The entry point for watching a folder.

        ``changed``: only these paths under the folder changed (a watcher's events; folders among
        them are walked); None looks at the whole folder. A watched folder's row records the sync
        (not a stopped one: ``cancel`` as for ``ingest``). Raises NotADirectoryError, before
        changing anything, when the folder is not there.
        """
        root = _absolute(folder)
        if not os.path.isdir(root):
            raise NotADirectoryError(f"not a folder: {folder}")
        paths = [root] if changed is None else self._changed_under(root, changed)
        report = self.ingest(paths, progress, keep_missing=keep_missing, cancel=cancel) if paths else IngestReport()
        if not report.stopped:
            self.manifest.record_sync(self.config.collection, root)
        return report

    def _changed_under(self, root: str, changed: Iterable[str | os.PathLike]) -> list[str]:
        """The changed paths a sync of ``root`` looks at, as a walk of ``root`` would see them:
        under it, not hidden, not a symlinked folder; a vanished path only if something under it
        was indexed or failed (a temporary file that came and went is nobody's business)."""
        coll = self.config.collection
        known = [r.path for r in self.manifest.files(coll)] + list(self.manifest.failures(coll))
        picked = set()
        for raw in changed:
            path = _absolute(raw)
            if path == root:
                return [root]  # the folder itself: all of it
            if not under(path, root):
                continue
            if any(part.startswith(".") for part in os.path.relpath(path, root).split(os.sep)):
                continue
            if os.path.islink(path) and os.path.isdir(path):
                continue
            if os.path.lexists(path) or any(under(k, path) for k in known):
                picked.add(path)
        return sorted(picked)

    # ------------------------------------------------------------ watched folders
    def watch(self, folder: str | os.PathLike) -> str:
        """Remember ``folder`` as kept in sync for this collection (a watcher syncs it); returns its
        absolute path. Raises ValueError (one line) for a path that is not a folder, or one that
        holds this index (the index would index itself) or lies inside it."""
        root = _absolute(folder)
        if not os.path.isdir(root):
            raise ValueError(f"not a folder: {folder}")
        index_dir = _absolute(self.dir)
        if under(index_dir, root):
            raise ValueError(f"{root} holds the index folder {index_dir}: the index would index itself")
        if under(root, index_dir):
            raise ValueError(f"{root} is inside the index folder {index_dir}")
        self.manifest.add_watch(self.config.collection, root)
        return root

    def unwatch(self, folder: str | os.PathLike) -> bool:
        """Stop keeping ``folder`` in sync; its documents stay (``remove(folder)`` deletes them).
        False when it was not watched."""
        return self.manifest.remove_watch(self.config.collection, _absolute(folder))

    def watched_folders(self) -> list[WatchedFolder]:
        """This collection's watched folders with their documents' counts, failures and last sync."""
        docs = self.list_documents()
        listed = []
        for w in self.manifest.watches(self.config.collection):
            mine = [d for d in docs if under(d.path, w.folder)]
            count = Counter(d.status for d in mine)
            listed.append(
                WatchedFolder(
                    w.folder,
                    w.collection,
                    indexed=count["indexed"],
                    chunks=sum(d.chunks for d in mine if d.status == "indexed"),
                    failed=tuple((d.path, d.reason) for d in mine if d.status == "failed"),
                    missing=count["missing"],
                    stale=count["stale"],
                    added_at=w.added_at,
                    last_sync=w.last_sync,
                    last_error=w.last_error,
                )
            )
        return listed

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

    def bm25_ids(self) -> tuple[str, ...]:
        """The chunk ids the keyword index holds (brought up to the manifest's generation first)."""
        return self._ensure_bm25().ids

    def rebuild_bm25(self) -> None:
        """Build the keyword index again from Chroma's texts, whatever its generation says."""
        self._bm25_store().build(self._live_texts(), self.manifest.generation(self.config.collection))

    def _live_texts(self) -> list[tuple[str, str]]:
        """(chunk id, text) of every live chunk, read in one session (a consistent snapshot)."""
        live = self.manifest.live_versions(self.config.collection, self.space)
        return [(cid, doc) for cid, doc, _ in self._live_rows(live)]

    def _live_rows(self, live: dict[str, str]) -> list[tuple[str, str, dict]]:
        """(chunk id, text, metadata) of every chunk of a ``live`` version, read in one session."""
        rows: list[tuple[str, str, dict]] = []
        with self.store.session():
            col = self._collection(self.space, create=False)
            offset = 0
            while col is not None and live:
                page = col.get(include=["documents", "metadatas"], limit=READ_PAGE, offset=offset)
                if not page["ids"]:
                    break
                rows += [(cid, doc, meta) for cid, doc, meta
                         in zip(page["ids"], page["documents"], page["metadatas"], strict=True)
                         if meta is not None and meta.get("ver") in live]
                offset += len(page["ids"])
        return rows

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
        return [_hit(cid, *by_id[cid], live, dense.get(cid), lexical.get(cid), score)
                for cid, score in fused if cid in by_id]

    def live_hits(self) -> list[Hit]:
        """Every live chunk as a Hit (no scores), the most recently indexed document's first, each
        document's in order: what a background warm of the chunk cache goes through."""
        coll = self.config.collection
        live = self.manifest.live_versions(coll, self.space)
        when = {r.path: r.indexed_at for r in self.manifest.files(coll)}
        hits = [_hit(cid, doc, meta, live) for cid, doc, meta in self._live_rows(live)]
        order = {h.chunk_id: i for i, h in enumerate(hits)}
        return sorted(hits, key=lambda h: (-when.get(h.file, 0.0), h.file, h.line_start or 0, h.page or 0,
                                           order[h.chunk_id]))

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
        target = _absolute(path)
        coll = self.config.collection
        with self.write_lock(progress):
            self.store.check()
            self._recover(progress or (lambda event: None))
            paths = [r.path for r in self.manifest.files(coll) if under(r.path, target)]
            paths += [p for p in self.manifest.failures(coll) if under(p, target)]
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


def _hit(cid: str, doc: str, meta: dict, live: dict[str, str], dense: float | None = None,
         lexical: float | None = None, fused: float = 0.0) -> Hit:
    return Hit(
        chunk_id=cid,
        text=doc,
        file=live.get(meta["ver"], meta["file"]),
        page=meta.get("page"),
        line_start=meta.get("line_start"),
        line_end=meta.get("line_end"),
        heading_path=tuple(json.loads(meta.get("heading_path", "[]"))),
        ocr=bool(meta.get("ocr", False)),
        dense_score=dense,
        bm25_score=lexical,
        fused_score=fused,
    )
