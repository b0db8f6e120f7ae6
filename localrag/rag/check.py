"""The index's own fsck: ``python -m localrag check [--collection C] [--repair] [--json]``.

    report = IndexCheck(index, uploads_dir=Path("data/uploads")).run()      # full: sweep + hashes
    report.ok, [p.line() for p in report.problems]
    done = IndexCheck(index).repair(report)                                 # what it did, in words

It walks one collection and says exactly what is inconsistent, each problem with its file and
chunk where it has one:

- the manifest, the Chroma ids and the BM25 ids are the same set (chunks missing from Chroma,
  Chroma chunks no file owns, BM25 behind), and no dead writer's work is left;
- Chroma has not called the vector index damaged, and (full check) every stored vector is
  reachable by a query with itself and no two texts share one stored vector
  (``localrag.rag.vectors``);
- every indexed file still exists, with its recorded size and (full check) content hash;
- every file was embedded with the loaded embedding model and chunk settings;
- no upload copy under the data folder is orphaned (no document refers to it).

The cheap check (``full=False``) skips the sweep and the hashing; the app runs it at start.
``repair`` fixes what it can, in an order where each step leaves what the next reads consistent:
the damaged graph and a dead writer's work first, then the ids, the files, the graph, BM25, the
uploads; then it checks again. A file gone from disk is only dropped when asked
(``drop_missing``): a folder on an unmounted drive keeps its documents until then.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from localrag.rag.index import DocumentIndex
from localrag.rag.ingest import collect_garbage, recover
from localrag.rag.store import READ_PAGE
from localrag.rag.targets import file_sha256
from localrag.rag.vectors import heal, repair_graph, sweep

ORPHAN_UPLOAD_AGE_S = 600  # a younger upload copy may be staged for an ingest that has not begun

KINDS = {
    "damaged": "Chroma reported the vector index damaged after a crash",
    "unfinished": "work a writer that died left behind",
    "missing-chunks": "chunks of an indexed file are missing from the vector store",
    "orphan-chunks": "chunks in the vector store that no indexed file owns",
    "bm25": "the keyword (BM25) index differs from the manifest",
    "unreachable": "a stored vector no query can reach",
    "collided": "chunks sharing one stored vector with another text",
    "changed": "the file changed on disk since it was indexed",
    "missing-file": "the indexed file is gone from disk",
    "stale-model": "embedded with another embedding model or chunk settings than the loaded ones",
    "orphan-upload": "an upload copy that no document refers to",
}


@dataclass(frozen=True)
class Problem:
    """One inconsistency: its kind (a key of KINDS), one line for a person, and where."""

    kind: str
    detail: str
    file: str = ""
    chunk: str = ""

    def line(self) -> str:
        where = f"{self.file}" + (f" chunk {self.chunk}" if self.chunk else "") if self.file or self.chunk else ""
        return f"{self.kind}: {where + ': ' if where else ''}{self.detail}"


@dataclass
class CheckReport:
    """What one check found. ``timings``: seconds per part; ``swept``: vectors the sweep queried."""

    collection: str
    full: bool
    files: int = 0
    chunks: int = 0
    problems: list[Problem] = field(default_factory=list)
    repaired: list[str] = field(default_factory=list)
    swept: int = 0
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.problems

    def kinds(self) -> set[str]:
        return {p.kind for p in self.problems}

    def summary(self) -> str:
        """'clean: 12 files, 340 chunks' or '3 problems: 2 unreachable, 1 bm25'."""
        if self.ok:
            return f"clean: {self.files} files, {self.chunks} chunks"
        counts: dict[str, int] = {}
        for p in self.problems:
            counts[p.kind] = counts.get(p.kind, 0) + 1
        listed = ", ".join(f"{n} {kind}" for kind, n in counts.items())
        return f"{len(self.problems)} problem{'s' * (len(self.problems) != 1)}: {listed}"

    def to_dict(self) -> dict:
        d = asdict(self)
        d["ok"] = self.ok
        return d


class IndexCheck:
    """Check (and repair) one collection of an index. ``uploads_dir``: the app's uploads folder
    (``<data dir>/uploads``), whose ``<collection>/`` copies are checked for orphans; None skips."""

    def __init__(self, index: DocumentIndex, uploads_dir: Path | None = None) -> None:
        self.index = index
        self.uploads_dir = Path(uploads_dir) if uploads_dir is not None else None
        self.coll = index.config.collection

    # ------------------------------------------------------------ check
    def run(self, full: bool = True) -> CheckReport:
        report = CheckReport(self.coll, full)
        records = self.index.manifest.files(self.coll)
        report.files = len(records)
        for name, part in (("store", self._store), ("ids", self._ids), ("files", self._files),
                           ("model", self._model), ("uploads", self._uploads)):
            t0 = time.perf_counter()
            part(report, records)
            report.timings[name] = round(time.perf_counter() - t0, 3)
        if full:
            t0 = time.perf_counter()
            self._graph(report)
            report.timings["reachability"] = round(time.perf_counter() - t0, 3)
        return report

    def _store(self, report: CheckReport, records) -> None:
        idx, m = self.index, self.index.manifest
        state = m.space_state(idx.space)
        if not state.damaged:
            with idx.store.session():  # the first use of the space replays Chroma's log: damage shows there
                idx.store.collection(idx.space, create=False)
            state = m.space_state(idx.space)
        if state.damaged:
            report.problems.append(Problem("damaged", f"{KINDS['damaged']} ({state.damaged})"))
        if state.rebuild:
            report.problems.append(Problem("unfinished", "a rebuild of the vector index was interrupted"))
        for ver, space in m.pending():
            if space == idx.space:
                report.problems.append(Problem("unfinished", "a file version was begun and never committed",
                                               chunk=f"{ver}:*"))
        for ver, space in m.garbage():
            if space == idx.space:
                report.problems.append(Problem("unfinished", "a replaced file version is still to be deleted",
                                               chunk=f"{ver}:*"))

    def _ids(self, report: CheckReport, records) -> None:
        idx = self.index
        live = [r for r in records if r.space == idx.space]
        expected = {f"{r.ver}:{i}": r for r in live for i in range(r.n_chunks)}
        stored = idx.store.ids(idx.space)
        report.chunks = len(stored)
        owed = {v for v, s in idx.manifest.pending() + idx.manifest.garbage() if s == idx.space}
        for rec in live:
            gone = [i for i in range(rec.n_chunks) if f"{rec.ver}:{i}" not in stored]
            if gone:
                what = "all" if len(gone) == rec.n_chunks else f"{len(gone)} of"
                report.problems.append(Problem("missing-chunks", f"{what} its {rec.n_chunks} chunks are missing "
                                               f"from the vector store", rec.path, _chunk_list(rec.ver, gone)))
        orphans = sorted(c for c in stored - set(expected) if c.split(":", 1)[0] not in owed)
        files = self._files_of(orphans)
        for cid in orphans:
            report.problems.append(Problem("orphan-chunks", "no indexed file owns it", files.get(cid, ""), cid))
        bm25 = set(idx.bm25_ids())
        for cid in sorted((set(expected) & stored) - bm25):  # (BM25 is built from Chroma's texts)
            report.problems.append(Problem("bm25", "missing from the keyword index", expected[cid].path, cid))
        for cid in sorted(bm25 - set(expected)):
            report.problems.append(Problem("bm25", "in the keyword index but not indexed", chunk=cid))

    def _files_of(self, ids: list[str]) -> dict[str, str]:
        """chunk id -> the file its metadata names (for ids no manifest row explains)."""
        out: dict[str, str] = {}
        for start in range(0, len(ids), READ_PAGE):
            with self.index.store.session():
                col = self.index.store.collection(self.index.space, create=False)
                got = col.get(ids=ids[start : start + READ_PAGE], include=["metadatas"])
            out.update({cid: (meta or {}).get("file", "") for cid, meta in zip(got["ids"], got["metadatas"], strict=True)})
        return out

    def _files(self, report: CheckReport, records) -> None:
        for rec in records:
            try:
                st = os.stat(rec.path)
            except OSError:
                report.problems.append(Problem("missing-file", f"{KINDS['missing-file']} (drop it with "
                                               "`docs remove` or `check --repair --drop-missing`)", rec.path))
                continue
            if st.st_size != rec.size:
                report.problems.append(Problem("changed", f"{rec.size} bytes when indexed, {st.st_size} now", rec.path))
            elif report.full and file_sha256(rec.path) != rec.content_hash:
                report.problems.append(Problem("changed", "its content hash differs from the indexed one", rec.path))

    def _model(self, report: CheckReport, records) -> None:
        build = self.index.build
        for rec in records:
            if rec.emb_fp != build.emb_fp:
                report.problems.append(Problem("stale-model", f"embedded with {rec.emb_fp}; the loaded embedding "
                                               f"model is {build.emb_fp}", rec.path))
            elif not build.fresh(rec):
                report.problems.append(Problem("stale-model", f"chunked with other settings ({rec.chunk_fp}) than "
                                               f"the loaded ones ({build.chunk_fp})", rec.path))

    def _uploads(self, report: CheckReport, records) -> None:
        folder = self.uploads_dir / self.coll if self.uploads_dir is not None else None
        if folder is None or not folder.is_dir():
            return
        known = {r.path for r in records} | set(self.index.manifest.failures(self.coll))
        now = time.time()
        for path in sorted(folder.rglob("*")):
            if not path.is_file() or path.name.startswith("."):
                continue
            if str(path.absolute()) not in known and now - path.stat().st_mtime > ORPHAN_UPLOAD_AGE_S:
                report.problems.append(Problem("orphan-upload", KINDS["orphan-upload"], str(path)))

    def _graph(self, report: CheckReport) -> None:
        idx = self.index
        if "damaged" in report.kinds():
            return  # every stored vector is suspect; the repair rebuilds from the texts
        found = sweep(idx.store, idx.space)
        report.swept = found.n
        files = self._files_of(sorted(set(found.unreachable) | set(found.collided)))
        for cid in found.unreachable:
            report.problems.append(Problem("unreachable", "a query with its own vector does not find it",
                                           files.get(cid, ""), cid))
        for cid in found.collided:
            report.problems.append(Problem("collided", "its stored vector is also another text's",
                                           files.get(cid, ""), cid))

    # ------------------------------------------------------------ repair
    def repair(self, report: CheckReport, drop_missing: bool = False) -> CheckReport:
        """Fix what ``report`` found, then check again (the same way); the new report lists what
        was done in ``repaired`` and what is left in ``problems``."""
        idx, kinds, done = self.index, report.kinds(), []
        by_kind: dict[str, list[Problem]] = {}
        for p in report.problems:
            by_kind.setdefault(p.kind, []).append(p)
        with idx.write_lock():
            done += heal(idx.store, idx.manifest, idx.space, idx.embedder)
            if recover(idx.manifest, idx.store):
                done.append("deleted what a writer that died left behind")
            orphans = [p.chunk for p in by_kind.get("orphan-chunks", [])]
            if orphans:
                with idx.store.session():
                    idx.store.collection(idx.space, create=False).delete(ids=orphans)
                done.append(f"deleted {len(orphans)} chunk(s) no indexed file owned")
            redo = sorted({p.file for k in ("missing-chunks", "changed") for p in by_kind.get(k, [])})
            present = [path for path in redo if os.path.exists(path)]
            if redo:  # retire the versions (their remaining chunks go), then index what is on disk again
                idx.manifest.remove(self.coll, redo)
                collect_garbage(idx.manifest, idx.store)
        if redo or "stale-model" in kinds:
            stale = [p.file for p in by_kind.get("stale-model", []) if os.path.exists(p.file)]
            got = idx.ingest(sorted(set(present) | set(stale)))
            done.append(f"indexed {got.added + got.replaced} file(s) again"
                        + (f"; {len(redo) - len(present)} gone from disk were dropped" if len(present) < len(redo) else ""))
            done += got.repaired
        missing = [p.file for p in by_kind.get("missing-file", [])]
        if missing and drop_missing:
            n = sum(idx.remove(path) for path in missing)
            done.append(f"dropped {n} document(s) whose files are gone")
        with idx.write_lock():
            if kinds & {"unreachable", "collided"}:
                done += repair_graph(idx.store, idx.manifest, idx.space, idx.embedder)[1]
            if "bm25" in kinds:
                idx.rebuild_bm25()
                done.append("rebuilt the keyword (BM25) index")
        for p in by_kind.get("orphan-upload", []):
            Path(p.file).unlink(missing_ok=True)
        if "orphan-upload" in kinds:
            done.append(f"deleted {len(by_kind['orphan-upload'])} orphaned upload copies")
        after = self.run(full=report.full)
        after.repaired = done
        return after


def _chunk_list(ver: str, seqs: list[int]) -> str:
    """'ver:3' or 'ver:3,7,9' or 'ver:0-41' for a run."""
    if len(seqs) > 3 and seqs == list(range(seqs[0], seqs[-1] + 1)):
        return f"{ver}:{seqs[0]}-{seqs[-1]}"
    return f"{ver}:" + ",".join(map(str, seqs[:20])) + ("…" if len(seqs) > 20 else "")

