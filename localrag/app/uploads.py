"""Uploaded files, from the page, the HTTP API or the MCP tools: safe names, copied under
``<data_dir>/uploads/<collection>/``, then ingested.

A client controls the names it sends. ``safe_name`` keeps only the last path
component, drops control characters and anything that is not a plain file name
character, and never returns '.', '..' or a hidden name; ``stage_uploads``
then checks that every resolved target really lies inside the uploads folder.

    staged = stage_uploads(["/tmp/gradio/abc/../../evil.txt"], Path("data/uploads/default"))
    # -> [("evil.txt", Path("data/uploads/default/evil.txt"))]
    result = add_documents(services, [Upload("notes.md", io.BytesIO(b"..."), size=3)], "work")
    # -> AddResult("work", (FileOutcome("notes.md", "added", chunks=1),))   (the API's and MCP's way)
"""

from __future__ import annotations

import re
import shutil
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from localrag.app.services import Services
from localrag.rag.config import IndexConfig
from localrag.rag.records import IngestEvent

MAX_NAME = 120
_UNSAFE = re.compile(r"[^\w.\- ()+,@]+", re.UNICODE)


class UploadError(ValueError):
    """An upload that cannot be staged; the message says why."""


def safe_name(name: str) -> str:
    """A file name that is safe to join to a folder: no separators, no '..', not hidden."""
    base = re.split(r"[\\/]", str(name))[-1]
    base = unicodedata.normalize("NFC", base)
    base = "".join(ch for ch in base if unicodedata.category(ch)[0] != "C")  # control/format chars
    base = _UNSAFE.sub("_", base).strip(" .")
    base = re.sub(r"\.{2,}", ".", base)
    if not base:
        base = "upload"
    if len(base) > MAX_NAME:
        stem, dot, ext = base.rpartition(".")
        base = (stem[: MAX_NAME - len(ext) - 1] + "." + ext) if dot and len(ext) < 16 else base[:MAX_NAME]
    return base


def inside(path: Path, root: Path) -> bool:
    """True when ``path`` resolves to somewhere under ``root`` (symlinks followed)."""
    try:
        path.resolve().relative_to(root.resolve())
    except ValueError:
        return False
    return True


def stage_uploads(sources: Iterable[str | Path], target_dir: Path,
                  names: Iterable[str] | None = None) -> list[tuple[str, Path]]:
    """Copy uploaded temp files into ``target_dir`` under safe names; returns (shown name, staged path).

    ``names``: the names the browser sent, when they differ from the temp files' names.
    Re-uploading a file of the same name replaces it (ingest then sees the new content);
    two uploads with the same name in one batch get ``name (2).ext``.
    """
    sources = [Path(s) for s in sources]
    names = list(names) if names is not None else [s.name for s in sources]
    taken: set[str] = set()
    return [stage_one(src, raw, Path(target_dir), taken) for src, raw in zip(sources, names, strict=True)]


def stage_one(src: Path | BinaryIO, raw: str, target_dir: Path, taken: set[str]) -> tuple[str, Path]:
    """Copy one upload (a file, or a stream read to its end) into ``target_dir`` under a safe name
    not in ``taken`` (which it joins); UploadError or OSError when it cannot."""
    target_dir.mkdir(parents=True, exist_ok=True)
    name = safe_name(raw)
    stem, dot, ext = name.rpartition(".")
    if not dot:
        stem, ext = name, ""
    n = 2
    while name in taken:
        name = f"{stem} ({n}){'.' + ext if ext else ''}"
        n += 1
    taken.add(name)
    dest = target_dir / name
    if not inside(dest, target_dir) or dest.is_symlink():
        raise UploadError(f"{raw}: refusing to write outside {target_dir}")
    if isinstance(src, Path) and not src.is_file():
        raise UploadError(f"{raw}: upload is missing or not a file")
    tmp = dest.with_name(f".{name}.part")
    try:
        if isinstance(src, Path):
            shutil.copyfile(src, tmp)
        else:
            with open(tmp, "wb") as out:
                shutil.copyfileobj(src, out)
        tmp.replace(dest)
    finally:
        tmp.unlink(missing_ok=True)
    return name, dest


# ------------------------------------------------------------ adding documents from other tools

# what ingest did with a file -> what the client is told ('moved': the same bytes under a new
# name, re-pathed without re-embedding, so for the client the document was added)
OUTCOMES = {"added": "added", "moved": "added", "skipped": "unchanged", "replaced": "replaced", "failed": "failed"}


@dataclass(frozen=True)
class Upload:
    """One file a client sent: the name it gave, its bytes (a stream) and their count."""

    name: str
    data: BinaryIO
    size: int


@dataclass(frozen=True)
class FileOutcome:
    name: str  # the name it is kept under (sanitised): what the collection lists and citations show
    outcome: str  # added | unchanged | replaced | failed
    chunks: int = 0
    error: str = ""  # why it failed ('' otherwise)

    def to_dict(self) -> dict:
        d = {"name": self.name, "outcome": self.outcome, "chunks": self.chunks}
        return {**d, "error": self.error} if self.error else d


@dataclass(frozen=True)
class AddResult:
    collection: str
    files: tuple[FileOutcome, ...]

    def to_dict(self) -> dict:
        return {"collection": self.collection, "files": [f.to_dict() for f in self.files]}


def document_name(path: str, uploads_dir: Path) -> str:
    """An uploaded file by its name within its collection; a file indexed from elsewhere by its path."""
    p = Path(path)
    for root in (uploads_dir.resolve(), uploads_dir):
        try:
            rel = p.relative_to(root)
        except ValueError:
            continue
        return str(Path(*rel.parts[1:])) if len(rel.parts) > 1 else str(rel)
    return str(p)


def collection_error(name: str) -> str:
    """'' when ``name`` can name a collection, else why not (letters, digits, '-' and '_')."""
    try:
        IndexConfig(collection=name)
    except ValueError as exc:
        return str(exc)
    return ""


def add_documents(services: Services, uploads: Sequence[Upload], collection: str) -> AddResult:
    """Stage ``uploads`` under the data directory and ingest them into ``collection`` (made if new),
    waiting for the index's write lock like every other writer; each file's outcome apart, so a
    file over the size limit, with a bad name or unreadable fails alone. ValueError for a bad
    collection name (before anything is written). Blocks for the whole ingest: call it off the
    event loop."""
    why = collection_error(collection)
    if why:
        raise ValueError(why)
    limits = services.index(collection).config
    target = services.uploads_dir / collection
    taken: set[str] = set()
    outcomes: dict[str, FileOutcome] = {}  # in the order sent: by staged path, or a key of its own if refused
    staged: list[tuple[str, Path]] = []
    for up in uploads:
        refused = limits.size_refusal(up.size)
        if refused:
            name = safe_name(up.name)
            outcomes[f"refused:{len(outcomes)}"] = FileOutcome(name, "failed", error=refused)
            continue
        try:
            name, path = stage_one(up.data, up.name, target, taken)
        except (UploadError, OSError) as exc:
            outcomes[f"refused:{len(outcomes)}"] = FileOutcome(safe_name(up.name), "failed", error=str(exc))
            continue
        key = str(path.resolve())
        outcomes[key] = FileOutcome(name, "failed", error="not ingested")  # until ingest says otherwise
        staged.append((name, path))
    if staged:
        services.ensure_embedder()
        names = {str(p.resolve()): n for n, p in staged}

        def note(event: IngestEvent) -> None:
            if event.kind == "file_done" and event.path in names:
                outcomes[event.path] = FileOutcome(names[event.path], OUTCOMES.get(event.status, "failed"),
                                                   event.chunks, event.reason if event.status == "failed" else "")

        services.index(collection).ingest([p for _, p in staged], progress=note)
    return AddResult(collection, tuple(outcomes.values()))
