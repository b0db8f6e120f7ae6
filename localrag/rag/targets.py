"""What an ingest looks at: the files under the paths it is given, and what the manifest knew.

    for path, error in expand(["~/papers", "notes.md"]): ...
    snapshot = Snapshot(manifest.files("default")); snapshot.claim_moved(digest, build.fresh)
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from localrag.rag.manifest import FileRecord


@dataclass(frozen=True)
class Target:
    """One file this run looks at: its position, path, size on disk and any error from the walk."""

    index: int
    path: str
    size: int = 0
    error: str = ""


def file_sha256(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(1 << 20):
            h.update(block)
    return h.hexdigest()


class Snapshot:
    """The manifest's file rows at the start of the run (only this run writes while it holds the lock)."""

    def __init__(self, records: list[FileRecord]) -> None:
        self.by_path = {r.path: r for r in records}
        self.by_hash: dict[str, list[FileRecord]] = {}
        for r in records:
            self.by_hash.setdefault(r.content_hash, []).append(r)
        self.claimed: set[str] = set()

    def claim_moved(self, digest: str, fresh: Callable[[FileRecord], bool]) -> FileRecord | None:
        """An indexed file with this content whose path is gone: the file moved (claimed once)."""
        for other in self.by_hash.get(digest, []):
            if fresh(other) and other.path not in self.claimed and not os.path.lexists(other.path):
                self.claimed.add(other.path)
                return other
        return None


def expand(paths: Iterable[str | os.PathLike], skip: Iterable[str | os.PathLike] = ()) -> Iterator[tuple[str, str]]:
    """Absolute paths with a pre-check error ('' when none): folders themselves, then the files
    under them (walked recursively, hidden entries skipped), and plain paths as given.

    `skip`: folders a walk does not enter (the index's own folder, when the folder being ingested
    holds it: its database files are not documents), unless the walk starts inside one."""
    seen: set[str] = set()
    skipped = {os.path.realpath(os.path.expanduser(str(d))) for d in skip}
    for raw in paths:
        p = os.path.abspath(os.path.expanduser(str(raw)))
        if os.path.isdir(p):
            items = [(p, "")]
            inside = any(under(os.path.realpath(p), d) for d in skipped)
            for root, dirs, files in os.walk(p):
                dirs[:] = sorted(d for d in dirs if not d.startswith(".")
                                 and (inside or os.path.realpath(os.path.join(root, d)) not in skipped))
                items += [(os.path.join(root, f), "") for f in sorted(files) if not f.startswith(".")]
        elif os.path.lexists(p):
            items = [(p, "")]
        else:
            items = [(p, "file not found")]
        for item in items:
            if item[0] not in seen:
                seen.add(item[0])
                yield item


def under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def size_of(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0

