"""Result types of the document index: search hits, ingest reports and progress events.

Plain frozen dataclasses, JSON-ready through ``to_dict``; no behaviour beyond
formatting, so the UI, the CLI and the chat layer can all consume them.

    hit.citation()            # 'report.pdf p.3' / 'scan.pdf p.2 (OCR)' / 'notes.md lines 10-24' / 'page.html § Installing'
    report.to_dict()          # {'seen': 12, 'added': 10, ..., 'failed': [{'path':..,'reason':..}]}
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

# The permalink a documentation generator puts in a heading (Sphinx, the Go spec: "¶"; others "🔗", "⚓"):
# not part of the title ("§ 3.6. Module Path¶").
PERMALINK_MARKS = "¶🔗⚓"
_PERMALINK_EDGE = re.compile(f"^[\\s{PERMALINK_MARKS}]+|[\\s{PERMALINK_MARKS}]+$")


def clean_heading(title: str) -> str:
    """A heading without the permalink marks at its start or end ("3.6. Module Path¶" -> "3.6. Module Path")."""
    return _PERMALINK_EDGE.sub("", title)


@dataclass(frozen=True)
class Hit:
    """One retrieved chunk with its anchors and the scores of each retriever.

    dense_score is cosine similarity (None if the chunk was not among the dense
    candidates), bm25_score the raw BM25 score (None likewise), fused_score the
    reciprocal-rank-fusion score used for the final order. ocr: the chunk's text
    was read by OCR from a scanned PDF page (its citation says so).
    """

    chunk_id: str
    text: str
    file: str
    page: int | None
    line_start: int | None
    line_end: int | None
    heading_path: tuple[str, ...]
    dense_score: float | None
    bm25_score: float | None
    fused_score: float
    ocr: bool = False

    def citation(self) -> str:
        name = Path(self.file).name
        if self.page is not None:
            return f"{name} p.{self.page} (OCR)" if self.ocr else f"{name} p.{self.page}"
        if self.heading_path and name.lower().endswith((".html", ".htm")):
            return f"{name} § {clean_heading(self.heading_path[-1])}"  # a reader of a web page sees headings, not source lines
        if self.line_start is None:
            return name
        same = self.line_end is None or self.line_end == self.line_start
        if name.lower().endswith(".docx"):  # DOCX has no lines: the span counts paragraphs
            return f"{name} ¶{self.line_start}" if same else f"{name} ¶{self.line_start}-{self.line_end}"
        return f"{name} line {self.line_start}" if same else f"{name} lines {self.line_start}-{self.line_end}"

    def snippet(self, width: int = 160) -> str:
        flat = " ".join(self.text.split())
        return flat if len(flat) <= width else flat[: width - 1] + "…"

    def to_dict(self) -> dict:
        d = asdict(self)
        d["heading_path"] = list(self.heading_path)
        d["citation"] = self.citation()
        return d


@dataclass
class IngestReport:
    """What one ``ingest`` call did. ``failed`` holds (path, reason) per file; ``removed``: files
    gone from an ingested folder, dropped from the index; ``missing``: the same, kept because
    the ingest was asked to keep them (they list as 'missing'); ``repaired``: what it repaired in
    the vector index, in words (after a crash: ``localrag.rag.vectors``). ``stopped``: the run was
    stopped (``cancel``) before every file was done; ``not_done`` lists those files (nothing of
    them is indexed by this run, and the next ingest does them)."""

    seen: int = 0
    added: int = 0
    skipped: int = 0
    replaced: int = 0
    moved: int = 0
    failed: list[tuple[str, str]] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    repaired: list[str] = field(default_factory=list)
    chunks: int = 0
    bytes: int = 0
    seconds: float = 0.0
    stopped: bool = False
    not_done: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["failed"] = [{"path": p, "reason": r} for p, r in self.failed]
        return d

    def summary(self) -> str:
        kept = f", kept missing {len(self.missing)}" if self.missing else ""
        stopped = f"; stopped: {len(self.not_done)} not done" if self.stopped else ""
        return (
            f"seen {self.seen}, added {self.added}, skipped {self.skipped}, replaced {self.replaced}, "
            f"moved {self.moved}, removed {len(self.removed)}{kept}, failed {len(self.failed)}, "
            f"chunks {self.chunks}, {self.seconds:.2f} s{stopped}"
        )


@dataclass(frozen=True)
class IngestEvent:
    """Progress callback payload.

    kind: 'waiting' (another writer holds the index; ``reason`` says who), 'repair' (the vector
    index is checked or repaired before or after the run; ``reason`` says how far), 'start' (total
    files known), 'file_start', 'chunks' (``chunks``: running chunk count of that file),
    'file_done' (status = added / skipped / replaced / moved / failed, with reason),
    'removed' (a file gone from an ingested folder: status 'removed', or 'missing' when
    kept), 'done' (status 'stopped' when the run was stopped before every file was done).

    Every event of a run also carries the run's totals so far: ``files_done`` of ``total``,
    ``chunks_done`` (written), ``bytes_done`` of ``bytes_total`` (a file counts in full once
    done, a file being written by the text it has written), ``chunks_per_s`` since the run
    started and ``eta_s`` (None until something is done), extrapolated from bytes.
    """

    kind: str
    index: int = 0
    total: int = 0
    path: str = ""
    status: str = ""
    chunks: int = 0
    reason: str = ""
    files_done: int = 0
    chunks_done: int = 0
    bytes_done: int = 0
    bytes_total: int = 0
    chunks_per_s: float = 0.0
    eta_s: float | None = None

    def progress_line(self) -> str:
        """'3/10 files · 120 chunks · 45.2 chunks/s · ETA 0:12': the run so far, for a person (a
        'repair' event: what is being repaired)."""
        if self.kind == "repair":
            return self.reason
        eta = "?" if self.eta_s is None else clock(self.eta_s)
        return (
            f"{self.files_done}/{self.total} files · {self.chunks_done} chunks · "
            f"{self.chunks_per_s:.1f} chunks/s · ETA {eta}"
        )


def clock(seconds: float) -> str:
    """Seconds as m:ss, or h:mm:ss from an hour."""
    m, s = divmod(int(round(seconds)), 60)
    return f"{m // 60}:{m % 60:02d}:{s:02d}" if m >= 60 else f"{m}:{s:02d}"


@dataclass(frozen=True)
class DocumentInfo:
    """A document as the index sees it.

    status: 'indexed'; 'stale' (embedding model or chunk settings changed; the
    next ingest re-embeds it); 'missing' (indexed, but the file is gone from
    disk); 'failed' (last ingest failed, see ``reason``).
    """

    path: str
    chunks: int
    status: str
    content_hash: str = ""
    size: int = 0
    reason: str = ""
    indexed_at: float = 0.0

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class WatchedFolder:
    """A folder a collection keeps in sync, as the index sees it now.

    ``indexed``: documents under it that are indexed (``chunks`` in all); ``failed``: (path,
    reason) of its files whose last ingest failed; ``missing``: indexed but gone from disk;
    ``stale``: to be re-embedded (other model or chunk settings). ``last_sync``: when its last
    sync finished (None: never), ``last_error``: why the last attempt failed ('' if it did not).
    """

    folder: str
    collection: str
    indexed: int = 0
    chunks: int = 0
    failed: tuple[tuple[str, str], ...] = ()
    missing: int = 0
    stale: int = 0
    added_at: float = 0.0
    last_sync: float | None = None
    last_error: str = ""

    def to_dict(self) -> dict:
        d = asdict(self)
        d["failed"] = [{"path": p, "reason": r} for p, r in self.failed]
        return d
