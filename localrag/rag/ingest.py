"""One ingest run, pipelined: a worker thread reads, hashes, parses and chunks the next files
while this thread embeds and writes the current batch.

    run = IngestRun(parts, progress=print, keep_missing=False)
    report = run.run(["~/papers", "notes.md"])        # the caller holds the index's write lock

Phases, one function each:

1. ``plan``: the files to look at (folders walked), the roots to reconcile, their sizes.
2. ``produce`` (worker thread): per file, pre-checks, size cap and hash decide skip / move /
   fail from a snapshot of the manifest; files to index are parsed and chunked into
   batches of up to WRITE_BATCH chunks that may span several small files. The queue
   between the threads is bounded, so a huge file streams: its chunk list is never held.
   A chunk whose text equals an earlier chunk of the same file is stored once (the
   first occurrence's place is cited): it adds nothing to search, and a vector graph
   made mostly of copies of a few vectors (a repetitive log, a file of one repeated
   line) cannot reach the collection's other vectors at all (measured: 2,688 chunks with
   33 distinct texts left every other file of the collection unreachable by dense search).
3. ``consume`` (this thread): begin a version before its first chunk is written, embed
   each batch sorted by length, write it to Chroma, and commit every file whose last
   chunk it held (the manifest protocol of :mod:`localrag.rag.manifest`).
4. ``reconcile``: files gone from a folder (or a path) that was ingested are removed
   (``keep_missing``: kept, and listed as missing).

Stopping (``cancel``, a ``threading.Event``): the writer checks it before each item it takes
from the worker, so a run stops at the next batch boundary. Files committed so far stay; the
versions still open (a file whose chunks were partly written) are deleted and their pending rows
dropped, exactly as the next run would after a crash; an edited file being replaced keeps its old
version. The report lists every file not done (``not_done``) and says ``stopped``; nothing is
reconciled. The next run picks those files up (the ones done are skipped by hash).

Progress events carry files done, chunks/s and an ETA from the bytes done so far.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

import numpy as np

from localrag.rag.chunk import Chunk, Chunker
from localrag.rag.config import IndexConfig
from localrag.rag.embed import Embedder, text_hash
from localrag.rag.manifest import FileRecord, Manifest
from localrag.rag.parse import ParseError, check_file, parse_file
from localrag.rag.records import IngestEvent, IngestReport
from localrag.rag.store import ChromaStore
from localrag.rag.targets import Snapshot, Target, expand, file_sha256, size_of, under

__all__ = ["Build", "IndexParts", "IngestRun", "collect_garbage", "recover"]

WRITE_BATCH = 256  # chunks per embed + Chroma add
MIN_BATCH = 32  # a batch goes early once the writer would otherwise wait
QUEUE_ITEMS = 4  # items between the threads: bounds memory whatever the file size

Progress = Callable[[IngestEvent], None]


@dataclass(frozen=True)
class Build:
    """How this index embeds and cuts text; a record built any other way is stale."""

    space: str
    emb_fp: str
    chunk_fp: str

    def fresh(self, rec: FileRecord) -> bool:
        return rec.emb_fp == self.emb_fp and rec.chunk_fp == self.chunk_fp and rec.space == self.space


@dataclass(frozen=True)
class IndexParts:
    """What an ingest run works with (owned by the DocumentIndex)."""

    config: IndexConfig
    manifest: Manifest
    store: ChromaStore
    chunker: Chunker
    embedder: Embedder
    build: Build


# ---- items from the worker thread to the writer
@dataclass(frozen=True)
class _Decided:
    """Needs no writing: skipped, moved (from ``moved_from``) or failed."""

    target: Target
    status: str
    chunks: int = 0
    reason: str = ""
    moved_from: str = ""


@dataclass(frozen=True)
class _Opened:
    """A file whose chunks follow: the writer begins its version before writing any."""

    target: Target
    digest: str
    size: int
    old: FileRecord | None


@dataclass
class _Batch:
    """Chunks to embed and write together; ``closed``: files whose last chunk is in it (or earlier)."""

    chunks: list[tuple[int, int, Chunk]] = field(default_factory=list)  # (target index, seq, chunk)
    closed: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class _Failed:
    """A file that failed after some of its chunks were sent: the writer deletes them."""

    target: Target
    reason: str


@dataclass(frozen=True)
class _Crashed:
    error: BaseException


_END = object()


class _Stopped(Exception):
    """The writer gave up (error or interrupt): the worker thread stops."""


@dataclass
class _OpenFile:
    opened: _Opened
    ver: str
    written: int = 0
    chars: int = 0


def collect_garbage(manifest: Manifest, store: ChromaStore) -> None:
    """Delete superseded versions' chunks; a garbage row goes only once Chroma confirms."""
    for ver, space in manifest.garbage():
        store.delete_version(space, ver)
        manifest.drop_garbage(ver)


def recover(manifest: Manifest, store: ChromaStore) -> bool:
    """Delete chunks of versions that never committed (a crash) or were superseded. Returns whether
    there were any: a writer that died (or lost its Chroma server) left them."""
    pending, garbage = manifest.pending(), manifest.garbage()
    for ver, space in pending:
        store.delete_version(space, ver)
        manifest.abandon(ver)
    collect_garbage(manifest, store)
    return bool(pending or garbage)


class IngestRun:
    """One ``DocumentIndex.ingest`` call (see the module docstring). The caller holds the write lock."""

    def __init__(self, parts: IndexParts, progress: Progress | None = None, keep_missing: bool = False,
                 cancel: threading.Event | None = None) -> None:
        self.p = parts
        self.coll = parts.config.collection
        self.emit = progress or (lambda event: None)
        self.keep_missing = keep_missing
        self.cancel = cancel or threading.Event()
        self.report = IngestReport()
        self.targets: list[Target] = []
        self.open: dict[int, _OpenFile] = {}
        self.done: set[int] = set()  # indexes of the targets whose file_done was emitted
        self.files_done = 0
        self.bytes_done = 0
        self.t0 = time.perf_counter()

    def run(self, paths: Iterable[str | os.PathLike]) -> IngestReport:
        """Plan, pipeline, reconcile; the report is also kept on ``self.report`` if this raises."""
        self.targets, roots = self.plan(paths)
        # Read here: the manifest's connection belongs to this thread.
        snapshot = Snapshot(self.p.manifest.files(self.coll))
        self.emit(self._event("start"))
        try:
            if self.p.config.parse_worker:
                self._consume_from_worker(snapshot)
            else:  # one thread: each batch is parsed, then embedded and written
                self.consume(self.produce(snapshot, writer_idle=lambda: False))
        finally:
            self._abandon_open()
        # stopped: asked to, with files left (the worker may have ended early, seeing it first)
        not_done = [t.path for t in self.targets if t.index not in self.done]
        if self.cancel.is_set() and not_done:
            self.report.stopped, self.report.not_done = True, not_done
        else:
            self.reconcile(roots)
        return self.report

    def _consume_from_worker(self, snapshot: Snapshot) -> None:
        """Run ``produce`` on a worker thread feeding a bounded queue; write on this thread."""
        items: queue.Queue = queue.Queue(maxsize=QUEUE_ITEMS)
        stop = threading.Event()

        def put(item) -> None:
            while not stop.is_set():
                try:
                    items.put(item, timeout=0.1)
                    return
                except queue.Full:
                    continue
            raise _Stopped

        def pump() -> None:
            try:
                for item in self.produce(snapshot, writer_idle=items.empty):
                    put(item)
                put(_END)
            except _Stopped:
                return
            except BaseException as exc:  # a bug here must reach the writer, not die with the thread
                with contextlib.suppress(_Stopped):
                    put(_Crashed(exc))

        worker = threading.Thread(target=pump, name="localrag-ingest-parse", daemon=True)
        worker.start()
        try:
            self.consume(iter(items.get, _END))
        finally:
            stop.set()  # a worker blocked on the full queue notices within its put timeout
            worker.join()

    # ------------------------------------------------------------ 1. plan
    def plan(self, paths: Iterable[str | os.PathLike]) -> tuple[list[Target], list[str]]:
        """Files to look at, and the roots (folders, vanished paths) whose vanished files are reconciled."""
        walked = list(expand(paths, skip=[self.p.config.index_dir]))  # the index's own files are not documents
        listed = {path for path, _ in walked}
        roots = [path for path, error in walked if error == "file not found" or os.path.isdir(path)]
        files = [(path, error) for path, error in walked if not os.path.isdir(path)]
        # A vanished path that was indexed is reconciled (removed), not reported as a failure.
        files = [(p, e) for p, e in files if not (e == "file not found" and self._knownunder(p))]
        # Files indexed with other settings are re-embedded by this ingest, whatever was asked.
        for rec in self.p.manifest.files(self.coll):
            if not self.p.build.fresh(rec) and rec.path not in listed and os.path.lexists(rec.path):
                files.append((rec.path, ""))
        targets = [Target(i, path, size_of(path), error) for i, (path, error) in enumerate(files, start=1)]
        return targets, roots

    def _knownunder(self, root: str) -> bool:
        return any(under(r.path, root) for r in self.p.manifest.files(self.coll)) or any(
            under(p, root) for p in self.p.manifest.failures(self.coll)
        )

    # ------------------------------------------------------------ 2. produce (worker thread)
    def produce(self, snapshot: Snapshot, writer_idle: Callable[[], bool]) -> Iterator[object]:
        """Decide each file from the manifest's snapshot; parse and chunk those to index into
        batches. ``writer_idle``: whether the writer is waiting (then a batch goes out at MIN_BATCH).
        Touches neither the manifest nor Chroma (it runs on the worker thread)."""
        batch = _Batch()
        for target in self.targets:
            if self.cancel.is_set():  # the writer stops at its next item: parse no further
                return
            decided = self._decide(target, snapshot)
            if not isinstance(decided, _Opened):
                yield decided
                continue
            batch = yield from self._chunk_file(decided, batch, writer_idle)
            if batch.chunks and writer_idle():  # hand the waiting writer what there is
                yield batch
                batch = _Batch()
        if batch.chunks or batch.closed:
            yield batch

    def _decide(self, target: Target, snapshot: Snapshot) -> _Decided | _Opened:
        if target.error:
            return _Decided(target, "failed", reason=target.error)
        try:
            st = check_file(target.path)
            refused = self.p.config.size_refusal(st.st_size)
            if refused:
                raise ParseError(refused)
            digest = file_sha256(target.path)
        except ParseError as exc:
            return _Decided(target, "failed", reason=str(exc))
        except OSError as exc:
            return _Decided(target, "failed", reason=f"unreadable: {exc.strerror or exc}")
        old = snapshot.by_path.get(target.path)
        if old is not None and old.content_hash == digest and self.p.build.fresh(old):
            return _Decided(target, "skipped", chunks=old.n_chunks)
        if old is None:
            other = snapshot.claim_moved(digest, self.p.build.fresh)
            if other is not None:
                return _Decided(target, "moved", chunks=other.n_chunks, moved_from=other.path)
        return _Opened(target, digest, st.st_size, old)

    def _chunk_file(self, opened: _Opened, batch: _Batch, writer_idle: Callable[[], bool]):
        """Stream one file's chunks into batches (yielding full ones); returns the batch still being filled."""
        key = opened.target.index
        seq = 0
        stored: set[str] = set()  # text hashes of this file's chunks so far
        try:
            for chunk in self.p.chunker.chunks(parse_file(opened.target.path)):
                digest = text_hash(chunk.text)
                if digest in stored:
                    continue  # see the module docstring: a repeated chunk of one file is stored once
                stored.add(digest)
                if seq == 0:
                    yield opened
                batch.chunks.append((key, seq, chunk))
                seq += 1
                if len(batch.chunks) >= WRITE_BATCH or (len(batch.chunks) >= MIN_BATCH and writer_idle()):
                    yield batch
                    batch = _Batch()
            reason = "" if seq else "no text found in file"
        except ParseError as exc:
            reason = str(exc)
        except Exception as exc:  # one bad file must never stop the others
            reason = f"{type(exc).__name__}: {exc}"
        if not reason:
            batch.closed.append(key)
            return batch
        batch.chunks = [entry for entry in batch.chunks if entry[0] != key]
        yield _Failed(opened.target, reason) if seq else _Decided(opened.target, "failed", reason=reason)
        return batch

    # ------------------------------------------------------------ 3. consume (this thread)
    def consume(self, items: Iterable[object]) -> None:
        for item in items:
            if self.cancel.is_set():  # a batch boundary: what is open is abandoned by run()
                return
            if isinstance(item, _Crashed):
                raise item.error
            if isinstance(item, _Decided):
                self._apply_decided(item)
            elif isinstance(item, _Opened):
                ver = uuid.uuid4().hex
                self.p.manifest.begin(self.coll, item.target.path, ver, self.p.build.space)
                self.open[item.target.index] = _OpenFile(item, ver)
                self.emit(self._event("file_start", item.target))
            elif isinstance(item, _Failed):
                done = self.open.pop(item.target.index)
                self.p.store.delete_version(self.p.build.space, done.ver)
                self.p.manifest.abandon(done.ver)
                self._fail(item.target, item.reason)
            else:
                self._write(item)

    def _apply_decided(self, item: _Decided) -> None:
        target = item.target
        self.emit(self._event("file_start", target))
        if item.status == "failed":
            self._fail(target, item.reason)
            return
        if item.status == "moved":
            self.p.manifest.move(self.coll, item.moved_from, target.path)
            self.report.moved += 1
        else:
            self.report.skipped += 1
        self._file_done(target, item.status, item.chunks)

    def _fail(self, target: Target, reason: str) -> None:
        """Record the failure; a version indexed before is retired (it is not the file's content now)."""
        self.p.manifest.fail_file(self.coll, target.path, reason)
        collect_garbage(self.p.manifest, self.p.store)
        self.report.failed.append((target.path, reason))
        self._file_done(target, "failed", 0, reason)

    def _write(self, batch: _Batch) -> None:
        if batch.chunks:
            self._add(batch.chunks)
            touched: dict[int, None] = {}
            for key, _, chunk in batch.chunks:
                self.open[key].written += 1
                self.open[key].chars += len(chunk.text)
                touched[key] = None
            for key in touched:
                done = self.open[key]
                self.emit(self._event("chunks", done.opened.target, chunks=done.written))
        for key in batch.closed:
            self._commit(self.open.pop(key))

    def _add(self, entries: list[tuple[int, int, Chunk]]) -> None:
        """Embed (texts sorted by length, so each model batch pads little; outside any store
        session) and write to Chroma."""
        texts = [chunk.text for _, _, chunk in entries]
        hashes = [text_hash(t) for t in texts]
        self._reuse_vectors(hashes)
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        vectors = np.empty((len(texts), self.p.embedder.dimension), dtype=np.float32)
        vectors[order] = self.p.embedder.embed([texts[i] for i in order])
        ids, metas = [], []
        for (key, seq, chunk), h in zip(entries, hashes, strict=True):
            done = self.open[key]
            ids.append(f"{done.ver}:{seq}")
            meta = {
                "ver": done.ver,
                "file": done.opened.target.path,
                "seq": seq,
                "text_hash": h,
                "n_tokens": chunk.n_tokens,
                "heading_path": json.dumps(list(chunk.heading_path), ensure_ascii=False),
            }
            anchors = {"page": chunk.page, "line_start": chunk.line_start, "line_end": chunk.line_end}
            meta.update({k: v for k, v in anchors.items() if v is not None})  # Chroma metadata has no null
            if chunk.ocr:
                meta["ocr"] = True
            metas.append(meta)
        with self.p.store.session():
            self.p.store.collection(self.p.build.space).add(ids=ids, embeddings=vectors, documents=texts, metadatas=metas)

    def _reuse_vectors(self, hashes: list[str]) -> None:
        """Copy vectors of identical chunks already in the space (edited/copied files) into the cache."""
        missing = sorted({h for h in hashes if not self.p.embedder.cached(h)})
        if not missing:
            return
        with self.p.store.session():
            col = self.p.store.collection(self.p.build.space)
            got = col.get(where={"text_hash": {"$in": missing}}, include=["embeddings", "metadatas"])
        embeddings = got.get("embeddings")
        if embeddings is None or len(embeddings) == 0:
            return
        self.p.embedder.prime({m["text_hash"]: e for m, e in zip(got["metadatas"], embeddings, strict=True)})

    def _commit(self, done: _OpenFile) -> None:
        opened, b = done.opened, self.p.build
        rec = FileRecord(
            self.coll, opened.target.path, opened.digest, opened.size, done.ver, b.space, b.emb_fp, b.chunk_fp,
            done.written,
        )  # fmt: skip
        old, _ = self.p.manifest.commit_file(rec)
        collect_garbage(self.p.manifest, self.p.store)
        self.report.chunks += done.written
        self.report.bytes += opened.size
        if old is not None:
            self.report.replaced += 1
        else:
            self.report.added += 1
        self._file_done(opened.target, "replaced" if old is not None else "added", done.written)

    def _abandon_open(self) -> None:
        """After an error: delete what open files wrote, where the store lets us (else the
        pending rows make the next run do it)."""
        for done in list(self.open.values()):
            try:
                self.p.store.delete_version(self.p.build.space, done.ver)
                self.p.manifest.abandon(done.ver)
            except Exception:  # the pending row keeps the work for the next run
                pass
        self.open.clear()

    # ------------------------------------------------------------ 4. reconcile
    def reconcile(self, roots: list[str]) -> None:
        """Files under ``roots`` that are indexed or failed but gone from disk: removed, or kept as missing."""
        if not roots:
            return
        gone = [
            r.path
            for r in self.p.manifest.files(self.coll)
            if any(under(r.path, root) for root in roots) and not os.path.lexists(r.path)
        ]
        failed_gone = [
            path
            for path in self.p.manifest.failures(self.coll)
            if any(under(path, root) for root in roots) and not os.path.lexists(path)
        ]
        if self.keep_missing:
            self.report.missing = sorted(gone)
            gone = []
        if gone or failed_gone:
            self.p.manifest.remove(self.coll, gone + failed_gone)
            collect_garbage(self.p.manifest, self.p.store)
        self.report.removed = sorted(gone)
        for path in self.report.removed:
            self.emit(self._event("removed", Target(0, path), status="removed"))
        for path in self.report.missing:
            self.emit(self._event("removed", Target(0, path), status="missing"))

    # ------------------------------------------------------------ progress
    def _file_done(self, target: Target, status: str, chunks: int, reason: str = "") -> None:
        self.done.add(target.index)
        self.report.seen += 1
        self.files_done += 1
        self.bytes_done += target.size
        self.emit(self._event("file_done", target, status=status, chunks=chunks, reason=reason))

    def _event(self, kind: str, target: Target | None = None, **fields) -> IngestEvent:
        elapsed = max(1e-9, time.perf_counter() - self.t0)
        total_bytes = sum(t.size for t in self.targets)
        done_bytes = self.bytes_done + sum(min(f.opened.size, f.chars) for f in self.open.values())
        chunks_done = self.report.chunks + sum(f.written for f in self.open.values())
        eta = elapsed * (total_bytes - done_bytes) / done_bytes if done_bytes else None
        return IngestEvent(
            kind,
            index=target.index if target else 0,
            total=len(self.targets),
            path=target.path if target else "",
            files_done=self.files_done,
            chunks_done=chunks_done,
            bytes_done=done_bytes,
            bytes_total=total_bytes,
            chunks_per_s=chunks_done / elapsed,
            eta_s=None if eta is None else max(0.0, eta),
            **fields,
        )
