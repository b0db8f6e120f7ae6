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
versioned replace. Writers take an exclusive file lock on the index folder.
"""

from __future__ import annotations

import fcntl
import hashlib
import itertools
import json
import os
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from localrag.rag.chunk import Chunk, Chunker, TokenCounter
from localrag.rag.config import IndexConfig
from localrag.rag.embed import Embedder, make_embedder, text_hash
from localrag.rag.manifest import FileRecord, Manifest
from localrag.rag.parse import ParseError, check_file, parse_file
from localrag.rag.records import DocumentInfo, Hit, IngestEvent, IngestReport
from localrag.rag.retrieve import Bm25Store, rrf_fuse

__all__ = ["DocumentIndex", "DocumentInfo", "Hit", "IndexConfig", "IngestEvent", "IngestReport"]

WRITE_BATCH = 256  # chunks per embed + Chroma add
READ_PAGE = 2000  # chunks per Chroma get when rebuilding BM25 or scanning

Progress = Callable[[IngestEvent], None]


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(1 << 20):
            h.update(block)
    return h.hexdigest()


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
        self._client = None
        self._chunker: Chunker | None = None
        self._bm25: dict[str, Bm25Store] = {}

    # ------------------------------------------------------------ plumbing
    @property
    def client(self):
        if self._client is None:
            import chromadb
            from chromadb.config import Settings

            settings = Settings(anonymized_telemetry=False)
            if self.config.chroma_host:
                self._client = chromadb.HttpClient(
                    host=self.config.chroma_host, port=self.config.chroma_port, settings=settings
                )
            else:
                self._client = chromadb.PersistentClient(path=str(self.dir / "chroma"), settings=settings)
        return self._client

    def _collection(self, space: str, create: bool = True):
        """The Chroma collection for ``space``, always with our embedding function (never Chroma's default)."""
        if create:
            return self.client.get_or_create_collection(
                space,
                embedding_function=self.embedder,
                metadata={
                    "hnsw:space": "cosine",
                    "localrag_collection": self.config.collection,
                    "embedding_model": self.emb_fp,
                },
            )
        try:
            return self.client.get_collection(space, embedding_function=self.embedder)
        except Exception:  # NotFoundError / ValueError depending on client mode
            return None

    @property
    def chunker(self) -> Chunker:
        if self._chunker is None:
            counter = TokenCounter.from_model_dir(self.config.model_path)
            self._chunker = Chunker(counter, self.config.chunk_tokens, self.config.overlap_tokens)
        return self._chunker

    @contextmanager
    def _write_lock(self) -> Iterator[None]:
        """One writer per index folder (CLI and UI may run side by side)."""
        with open(self.dir / ".write.lock", "a+") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def _recover(self) -> None:
        """Delete chunks of versions that never committed (crash) or were superseded."""
        for ver, space in self.manifest.pending():
            self._delete_version(ver, space)
            self.manifest.abandon(ver)
        self._collect_garbage()

    def _collect_garbage(self) -> None:
        for ver, space in self.manifest.garbage():
            self._delete_version(ver, space)
            self.manifest.drop_garbage(ver)

    def _delete_version(self, ver: str, space: str) -> None:
        """Delete every chunk of one file version from its embedding space (if that still exists)."""
        col = self._collection(space, create=False)
        if col is not None:
            col.delete(where={"ver": ver})

    def _drop_unused_spaces(self) -> None:
        """Remove Chroma collections of this collection's old embedding models once unreferenced."""
        in_use = self.manifest.spaces_in_use() | {self.space}
        prefix = f"{self.config.collection}-"
        for col in self.client.list_collections():
            name = col if isinstance(col, str) else col.name
            suffix = name[len(prefix) :]
            ours = len(suffix) == 10 and all(c in "0123456789abcdef" for c in suffix)
            if name.startswith(prefix) and ours and name not in in_use:
                self.client.delete_collection(name)

    def _fresh(self, rec: FileRecord) -> bool:
        return rec.emb_fp == self.emb_fp and rec.chunk_fp == self.chunk_fp and rec.space == self.space

    # ------------------------------------------------------------ ingest
    def ingest(self, paths: Iterable[str | os.PathLike], progress: Progress | None = None) -> IngestReport:
        """Index files and folders (recursively). Never raises for a bad file: see ``report.failed``."""
        t0 = time.perf_counter()
        report = IngestReport()
        emit = progress or (lambda event: None)
        with self._write_lock():
            self._recover()
            targets = list(_expand(paths))
            listed = {p for p, _ in targets}
            # Files indexed with other settings are re-embedded by this ingest, whatever was asked.
            for rec in self.manifest.files(self.config.collection):
                if not self._fresh(rec) and rec.path not in listed and os.path.lexists(rec.path):
                    targets.append((rec.path, None))
            emit(IngestEvent("start", total=len(targets)))
            for i, (path, error) in enumerate(targets, start=1):
                report.seen += 1
                emit(IngestEvent("file_start", index=i, total=len(targets), path=path))
                status, n, reason = "failed", 0, error or ""
                if not error:
                    try:
                        status, n = self._ingest_file(
                            path,
                            report,
                            lambda c, p=path, i=i: emit(
                                IngestEvent("chunks", index=i, total=len(targets), path=p, chunks=c)
                            ),
                        )
                    except ParseError as exc:
                        reason = str(exc)
                    except Exception as exc:  # one bad file must never stop the others
                        reason = f"{type(exc).__name__}: {exc}"
                if status == "failed":
                    report.failed.append((path, reason))
                    self.manifest.record_failure(self.config.collection, path, reason)
                else:
                    setattr(report, status, getattr(report, status) + 1)
                emit(
                    IngestEvent(
                        "file_done",
                        index=i,
                        total=len(targets),
                        path=path,
                        status=status,
                        chunks=n,
                        reason=reason,
                    )
                )
            self._drop_unused_spaces()
            self._ensure_bm25()
        report.seconds = time.perf_counter() - t0
        emit(IngestEvent("done", total=report.seen, chunks=report.chunks))
        return report

    def _ingest_file(
        self, path: str, report: IngestReport, on_chunks: Callable[[int], None]
    ) -> tuple[str, int]:
        st = check_file(path)
        digest = file_sha256(Path(path))
        coll = self.config.collection
        old = self.manifest.get(coll, path)
        if old is not None and old.content_hash == digest and self._fresh(old):
            return "skipped", old.n_chunks
        if old is None:
            for other in self.manifest.by_hash(coll, digest):
                if self._fresh(other) and not os.path.lexists(other.path):
                    self.manifest.move(coll, other.path, path)
                    return "moved", other.n_chunks
        ver = uuid.uuid4().hex
        col = self._collection(self.space)
        self.manifest.begin(coll, path, ver, self.space)
        n = 0
        try:
            chunks = self.chunker.chunks(parse_file(path))
            while batch := list(itertools.islice(chunks, WRITE_BATCH)):
                self._write_batch(col, ver, path, n, batch)
                n += len(batch)
                on_chunks(n)
            if n == 0:
                raise ParseError("no text found in file")
        except BaseException:
            # Best effort now; after a SIGKILL the pending row makes the next ingest do this.
            col.delete(where={"ver": ver})
            self.manifest.abandon(ver)
            raise
        self.manifest.commit_file(
            FileRecord(coll, path, digest, st.st_size, ver, self.space, self.emb_fp, self.chunk_fp, n)
        )
        self._collect_garbage()
        report.chunks += n
        report.bytes += st.st_size
        return ("replaced" if old is not None else "added"), n

    def _write_batch(self, col, ver: str, path: str, start: int, batch: list[Chunk]) -> None:
        texts = [c.text for c in batch]
        hashes = [text_hash(t) for t in texts]
        self._reuse_vectors(col, hashes)
        vectors = self.embedder.embed(texts)
        metas = []
        for i, (c, h) in enumerate(zip(batch, hashes, strict=True)):
            meta = {
                "ver": ver,
                "file": path,
                "seq": start + i,
                "text_hash": h,
                "n_tokens": c.n_tokens,
                "heading_path": json.dumps(list(c.heading_path), ensure_ascii=False),
            }
            for key in ("page", "line_start", "line_end"):
                if getattr(c, key) is not None:  # Chroma metadata has no null
                    meta[key] = getattr(c, key)
            if c.ocr:
                meta["ocr"] = True
            metas.append(meta)
        col.add(
            ids=[f"{ver}:{start + i}" for i in range(len(batch))],
            embeddings=vectors,
            documents=texts,
            metadatas=metas,
        )

    def _reuse_vectors(self, col, hashes: list[str]) -> None:
        """Copy vectors of identical chunks already in the space (edited/copied files) into the cache."""
        missing = sorted({h for h in hashes if not self.embedder.cached(h)})
        if not missing:
            return
        got = col.get(where={"text_hash": {"$in": missing}}, include=["embeddings", "metadatas"])
        embeddings = got.get("embeddings")
        if embeddings is None or len(embeddings) == 0:
            return
        self.embedder.prime({m["text_hash"]: e for m, e in zip(got["metadatas"], embeddings, strict=True)})

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

    def _live_texts(self) -> Iterator[tuple[str, str]]:
        live = self.manifest.live_versions(self.config.collection, self.space)
        col = self._collection(self.space, create=False)
        if col is None or not live:
            return
        offset = 0
        while True:
            page = col.get(include=["documents", "metadatas"], limit=READ_PAGE, offset=offset)
            if not page["ids"]:
                return
            for cid, doc, meta in zip(page["ids"], page["documents"], page["metadatas"], strict=True):
                if meta.get("ver") in live:
                    yield cid, doc
            offset += len(page["ids"])

    # ------------------------------------------------------------ search
    def search(self, query: str, k: int = 5) -> list[Hit]:
        """Hybrid search: dense and BM25 candidates fused by reciprocal rank fusion."""
        dense, lexical = self.rank(query, max(self.config.candidates, k))
        fused = rrf_fuse(
            [[c for c, _ in dense], [c for c, _ in lexical]],
            [self.config.dense_weight, self.config.bm25_weight],
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
                raise RuntimeError(
                    f"collection {coll!r} was embedded with {stale[0].emb_fp}; "
                    f"run ingest to re-embed it with {self.emb_fp}"
                )
        col = self._collection(self.space, create=False)
        if col is None or not live or not query.strip():
            return [], []
        count = col.count()
        qvec = self.embedder.embed([query]) if vector is None else [vector]
        res = col.query(
            query_embeddings=qvec, n_results=min(count, n * 2), include=["metadatas", "distances"]
        )
        dense = [
            (cid, 1.0 - float(dist))
            for cid, meta, dist in zip(res["ids"][0], res["metadatas"][0], res["distances"][0], strict=True)
            if meta.get("ver") in live
        ][:n]
        lexical = [
            (cid, s) for cid, s in self._ensure_bm25().search(query, n * 2) if cid.split(":", 1)[0] in live
        ][:n]
        return dense, lexical

    def _hits(self, fused: list[tuple[str, float]], dense: dict, lexical: dict) -> list[Hit]:
        if not fused:
            return []
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
        col = self._collection(self.space, create=False)
        got = col.get(ids=list(chunk_ids), include=["embeddings"])
        by_id = dict(zip(got["ids"], got["embeddings"], strict=True))
        missing = [c for c in chunk_ids if c not in by_id]
        if missing:
            raise KeyError(f"chunks not in the index: {missing[:3]}")
        return np.asarray([by_id[c] for c in chunk_ids], dtype=np.float32)

    # ------------------------------------------------------------ documents
    def list_documents(self) -> list[DocumentInfo]:
        coll = self.config.collection
        docs = []
        for rec in self.manifest.files(coll):
            status = "indexed" if self._fresh(rec) else "stale"
            if not os.path.lexists(rec.path):
                status = "missing"
            docs.append(
                DocumentInfo(
                    rec.path, rec.n_chunks, status, rec.content_hash, rec.size, indexed_at=rec.indexed_at
                )
            )
        known = {d.path for d in docs}
        docs += [
            DocumentInfo(p, 0, "failed", reason=r)
            for p, r in self.manifest.failures(coll).items()
            if p not in known
        ]
        return sorted(docs, key=lambda d: d.path)

    def remove(self, path: str | os.PathLike) -> int:
        """Remove a document, or every document under a folder; returns how many were removed."""
        target = os.path.abspath(os.path.expanduser(str(path)))
        coll = self.config.collection
        with self._write_lock():
            self._recover()
            paths = [
                r.path
                for r in self.manifest.files(coll)
                if r.path == target or r.path.startswith(target.rstrip(os.sep) + os.sep)
            ]
            paths += [p for p in self.manifest.failures(coll) if p == target]
            removed = self.manifest.remove(coll, paths)
            self._collect_garbage()
            self._drop_unused_spaces()
        return len(removed)

    def collections(self) -> list[str]:
        return self.manifest.collections()

    def chunk_count(self) -> int:
        """Chunks physically in this collection's Chroma space (all versions)."""
        col = self._collection(self.space, create=False)
        return 0 if col is None else col.count()

    def close(self) -> None:
        self.manifest.close()


def _expand(paths: Iterable[str | os.PathLike]) -> Iterator[tuple[str, str | None]]:
    """Absolute file paths (folders walked recursively, hidden entries skipped) with a pre-check error."""
    seen: set[str] = set()
    for raw in paths:
        p = os.path.abspath(os.path.expanduser(str(raw)))
        if os.path.isdir(p):
            walked = []
            for root, dirs, files in os.walk(p):
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                walked += [os.path.join(root, f) for f in sorted(files) if not f.startswith(".")]
            items = [(f, None) for f in walked]
        elif os.path.lexists(p):
            items = [(p, None)]
        else:
            items = [(p, "file not found")]
        for item in items:
            if item[0] not in seen:
                seen.add(item[0])
                yield item
