"""The ingest manifest: which file (path + content hash) is indexed as which chunk version.

A SQLite database (WAL, synchronous=FULL) in the index folder. It is the
source of truth for what is *done*; Chroma holds vectors, BM25 is derived.

Crash-safety protocol (every step is one SQLite transaction):

1. ``begin``: record a ``pending`` row for a fresh version id *before* any chunk
   of it is written to Chroma.
2. write the chunks to Chroma, each tagged with that version id.
3. ``commit_file``: in one transaction make the file row point at the new
   version, queue the old version (if any) as ``garbage``, drop the pending row.
4. delete the garbage version's chunks from Chroma and, only once Chroma confirms
   that none is left, its garbage row (a server that cannot be reached leaves the
   row for the next run).

A file that can no longer be indexed (emptied, now corrupt) or that was removed
retires its version the same way: file row out, garbage row in, one transaction.
Every mutation advances the collection's *generation*, which readers compare with
what they have loaded (the BM25 index).

A SIGKILL anywhere leaves either a pending row (its chunks are deleted on the
next start: no orphans) or a garbage row (same), and a file row exists only
once all its chunks were written. Rows also record the embedding model and
chunk settings they were built with, so a settings change is detected.

    from localrag.rag.manifest import Manifest
    m = Manifest(Path("docs_index/manifest.sqlite"))
    m.files("default")
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

SCHEMA = """
CREATE TABLE IF NOT EXISTS files (
    collection TEXT NOT NULL, path TEXT NOT NULL, content_hash TEXT NOT NULL, size INTEGER NOT NULL,
    ver TEXT NOT NULL, space TEXT NOT NULL, emb_fp TEXT NOT NULL, chunk_fp TEXT NOT NULL,
    n_chunks INTEGER NOT NULL, indexed_at REAL NOT NULL, PRIMARY KEY (collection, path));
CREATE INDEX IF NOT EXISTS files_hash ON files (collection, content_hash);
CREATE UNIQUE INDEX IF NOT EXISTS files_ver ON files (ver);
CREATE TABLE IF NOT EXISTS pending (
    ver TEXT PRIMARY KEY, collection TEXT NOT NULL, path TEXT NOT NULL, space TEXT NOT NULL,
    started REAL NOT NULL);
CREATE TABLE IF NOT EXISTS garbage (ver TEXT PRIMARY KEY, space TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS failures (
    collection TEXT NOT NULL, path TEXT NOT NULL, reason TEXT NOT NULL, at REAL NOT NULL,
    PRIMARY KEY (collection, path));
CREATE TABLE IF NOT EXISTS generations (collection TEXT PRIMARY KEY, generation INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS spaces (
    space TEXT PRIMARY KEY, written INTEGER NOT NULL DEFAULT 0, damaged TEXT NOT NULL DEFAULT '',
    rebuild TEXT NOT NULL DEFAULT '');
CREATE TABLE IF NOT EXISTS watches (
    collection TEXT NOT NULL, folder TEXT NOT NULL, added_at REAL NOT NULL, last_sync REAL,
    last_error TEXT NOT NULL DEFAULT '', PRIMARY KEY (collection, folder));
"""


@dataclass(frozen=True)
class FileRecord:
    """One indexed file: its content, the chunk version holding it and how it was built."""

    collection: str
    path: str
    content_hash: str
    size: int
    ver: str
    space: str
    emb_fp: str
    chunk_fp: str
    n_chunks: int
    indexed_at: float = 0.0


@dataclass(frozen=True)
class WatchRecord:
    """A folder a collection keeps in sync: when it was added, when its last sync finished (None:
    never) and why the last attempt failed ('' when it did not)."""

    collection: str
    folder: str
    added_at: float
    last_sync: float | None = None
    last_error: str = ""


@dataclass(frozen=True)
class SpaceState:
    """The health bookkeeping of one Chroma space (``localrag.rag.vectors``): chunks written since
    its last reachability sweep, why Chroma called its vector index damaged ('' when it did not),
    and the state of a rebuild in progress ('', 'copying' or 'copied')."""

    space: str
    written: int = 0
    damaged: str = ""
    rebuild: str = ""


class Manifest:
    """Small typed wrapper over the SQLite manifest; every mutation is one transaction."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(self.path), isolation_level=None, timeout=60, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.executescript(SCHEMA)

    def close(self) -> None:
        self._db.close()

    def _tx(self):
        return _Transaction(self._db)

    # ------------------------------------------------------------ queries
    def get(self, collection: str, path: str) -> FileRecord | None:
        row = self._db.execute(
            "SELECT * FROM files WHERE collection=? AND path=?", (collection, path)
        ).fetchone()
        return FileRecord(*row) if row else None

    def by_hash(self, collection: str, content_hash: str) -> list[FileRecord]:
        rows = self._db.execute(
            "SELECT * FROM files WHERE collection=? AND content_hash=? ORDER BY path",
            (collection, content_hash),
        ).fetchall()
        return [FileRecord(*r) for r in rows]

    def files(self, collection: str) -> list[FileRecord]:
        rows = self._db.execute(
            "SELECT * FROM files WHERE collection=? ORDER BY path", (collection,)
        ).fetchall()
        return [FileRecord(*r) for r in rows]

    def live_versions(self, collection: str, space: str) -> dict[str, str]:
        """ver -> path for files whose chunks live in ``space`` (the current embedding model)."""
        rows = self._db.execute(
            "SELECT ver, path FROM files WHERE collection=? AND space=?", (collection, space)
        ).fetchall()
        return dict(rows)

    def collections(self) -> list[str]:
        rows = self._db.execute(
            "SELECT collection FROM files UNION SELECT collection FROM generations"
            " UNION SELECT collection FROM watches ORDER BY 1"
        ).fetchall()
        return [r[0] for r in rows]

    def spaces_in_use(self) -> set[str]:
        rows = self._db.execute(
            "SELECT space FROM files UNION SELECT space FROM pending UNION SELECT space FROM garbage"
        ).fetchall()
        return {r[0] for r in rows}

    def pending(self) -> list[tuple[str, str]]:
        """(ver, space) of versions begun and neither committed nor abandoned."""
        return self._db.execute("SELECT ver, space FROM pending").fetchall()

    def garbage(self) -> list[tuple[str, str]]:
        return self._db.execute("SELECT ver, space FROM garbage").fetchall()

    def failures(self, collection: str) -> dict[str, str]:
        rows = self._db.execute(
            "SELECT path, reason FROM failures WHERE collection=?", (collection,)
        ).fetchall()
        return dict(rows)

    def generations(self) -> dict[str, int]:
        return dict(self._db.execute("SELECT collection, generation FROM generations").fetchall())

    def generation(self, collection: str) -> int:
        row = self._db.execute(
            "SELECT generation FROM generations WHERE collection=?", (collection,)
        ).fetchone()
        return int(row[0]) if row else 0

    def watches(self, collection: str | None = None) -> list[WatchRecord]:
        """Watched folders of one collection, or of every collection (None)."""
        if collection is None:
            rows = self._db.execute("SELECT * FROM watches ORDER BY collection, folder").fetchall()
        else:
            rows = self._db.execute(
                "SELECT * FROM watches WHERE collection=? ORDER BY folder", (collection,)
            ).fetchall()
        return [WatchRecord(*r) for r in rows]

    def space_state(self, space: str) -> SpaceState:
        row = self._db.execute("SELECT * FROM spaces WHERE space=?", (space,)).fetchone()
        return SpaceState(*row) if row else SpaceState(space)

    def space_states(self) -> list[SpaceState]:
        return [SpaceState(*r) for r in self._db.execute("SELECT * FROM spaces ORDER BY space").fetchall()]

    # ------------------------------------------------------------ mutations
    def note_written(self, space: str, n: int) -> None:
        """``n`` more chunks were added to ``space`` since its last sweep."""
        with self._tx() as db:
            db.execute("INSERT INTO spaces (space, written) VALUES (?, ?) "
                       "ON CONFLICT(space) DO UPDATE SET written=written+excluded.written", (space, n))

    def swept(self, space: str) -> None:
        with self._tx() as db:
            db.execute("UPDATE spaces SET written=0 WHERE space=?", (space,))

    def mark_damaged(self, space: str, reason: str) -> None:
        with self._tx() as db:
            db.execute("INSERT INTO spaces (space, damaged) VALUES (?, ?) "
                       "ON CONFLICT(space) DO UPDATE SET damaged=excluded.damaged", (space, reason or "damaged"))

    def set_rebuild(self, space: str, state: str) -> None:
        with self._tx() as db:
            db.execute("INSERT INTO spaces (space, rebuild) VALUES (?, ?) "
                       "ON CONFLICT(space) DO UPDATE SET rebuild=excluded.rebuild", (space, state))

    def rebuilt(self, space: str) -> None:
        """A rebuild replaced the space: a fresh graph, nothing damaged, nothing to sweep."""
        with self._tx() as db:
            db.execute("UPDATE spaces SET written=0, damaged='', rebuild='' WHERE space=?", (space,))

    def add_watch(self, collection: str, folder: str) -> bool:
        """Remember a watched folder; False when it already was."""
        with self._tx() as db:
            cur = db.execute(
                "INSERT OR IGNORE INTO watches (collection, folder, added_at) VALUES (?,?,?)",
                (collection, folder, time.time()),
            )
            return cur.rowcount == 1

    def remove_watch(self, collection: str, folder: str) -> bool:
        """Forget a watched folder (its documents stay); False when it was not watched."""
        with self._tx() as db:
            cur = db.execute("DELETE FROM watches WHERE collection=? AND folder=?", (collection, folder))
            return cur.rowcount == 1

    def record_sync(self, collection: str, folder: str, error: str = "") -> None:
        """A sync of a watched folder ended: done now (``error`` empty), or failed with ``error``
        (the last good sync time stays). A folder that is not watched is left alone."""
        with self._tx() as db:
            if error:
                db.execute(
                    "UPDATE watches SET last_error=? WHERE collection=? AND folder=?", (error, collection, folder)
                )
            else:
                db.execute(
                    "UPDATE watches SET last_sync=?, last_error='' WHERE collection=? AND folder=?",
                    (time.time(), collection, folder),
                )

    def begin(self, collection: str, path: str, ver: str, space: str) -> None:
        with self._tx() as db:
            db.execute("INSERT INTO pending VALUES (?,?,?,?,?)", (ver, collection, path, space, time.time()))

    def abandon(self, ver: str) -> None:
        """Forget a pending version whose chunks were already deleted."""
        with self._tx() as db:
            db.execute("DELETE FROM pending WHERE ver=?", (ver,))

    def commit_file(self, rec: FileRecord) -> tuple[FileRecord | None, int]:
        """Make ``rec`` live; returns the record it replaced (its version is now garbage) and the
        collection's new generation."""
        with self._tx() as db:
            old = _retire(db, rec.collection, rec.path)
            db.execute(
                "INSERT INTO files VALUES (?,?,?,?,?,?,?,?,?,?)",
                (
                    rec.collection,
                    rec.path,
                    rec.content_hash,
                    rec.size,
                    rec.ver,
                    rec.space,
                    rec.emb_fp,
                    rec.chunk_fp,
                    rec.n_chunks,
                    time.time(),
                ),
            )
            db.execute("DELETE FROM pending WHERE ver=?", (rec.ver,))
            db.execute("DELETE FROM failures WHERE collection=? AND path=?", (rec.collection, rec.path))
            return old, _bump(db, rec.collection)

    def move(self, collection: str, old_path: str, new_path: str) -> int:
        """A file moved: its chunks stay, only the path changes. Returns the new generation."""
        with self._tx() as db:
            db.execute(
                "UPDATE files SET path=? WHERE collection=? AND path=?", (new_path, collection, old_path)
            )
            db.execute("DELETE FROM failures WHERE collection=? AND path=?", (collection, new_path))
            return _bump(db, collection)

    def remove(self, collection: str, paths: list[str]) -> tuple[list[FileRecord], int]:
        """Drop file rows and failure entries; the versions become garbage (deleted from Chroma by
        the caller). Returns the removed records and the new generation."""
        removed: list[FileRecord] = []
        with self._tx() as db:
            for path in paths:
                rec = _retire(db, collection, path)
                if rec is not None:
                    removed.append(rec)
                db.execute("DELETE FROM failures WHERE collection=? AND path=?", (collection, path))
            return removed, _bump(db, collection)

    def fail_file(self, collection: str, path: str, reason: str) -> tuple[FileRecord | None, int]:
        """The file as it is now cannot be indexed: record why, and retire the version indexed
        before (its content is no longer the file's). Returns that record and the new generation."""
        with self._tx() as db:
            old = _retire(db, collection, path)
            db.execute(
                "INSERT OR REPLACE INTO failures VALUES (?,?,?,?)", (collection, path, reason, time.time())
            )
            return old, _bump(db, collection)

    def drop_garbage(self, ver: str) -> None:
        with self._tx() as db:
            db.execute("DELETE FROM garbage WHERE ver=?", (ver,))



def _retire(db: sqlite3.Connection, collection: str, path: str) -> FileRecord | None:
    """Drop a file row, queueing its version as garbage; returns the row (None if there was none)."""
    row = db.execute("SELECT * FROM files WHERE collection=? AND path=?", (collection, path)).fetchone()
    if row is None:
        return None
    rec = FileRecord(*row)
    db.execute("INSERT OR REPLACE INTO garbage VALUES (?,?)", (rec.ver, rec.space))
    db.execute("DELETE FROM files WHERE collection=? AND path=?", (collection, path))
    return rec


def _bump(db: sqlite3.Connection, collection: str) -> int:
    """Advance the collection's generation (readers compare it to what they have loaded)."""
    db.execute(
        "INSERT INTO generations VALUES (?, 1) ON CONFLICT(collection) DO UPDATE SET generation=generation+1",
        (collection,),
    )
    return int(db.execute("SELECT generation FROM generations WHERE collection=?", (collection,)).fetchone()[0])


class _Transaction:
    """``BEGIN IMMEDIATE`` ... ``COMMIT`` (or ``ROLLBACK`` on error) on an autocommit connection."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def __enter__(self) -> sqlite3.Connection:
        self.db.execute("BEGIN IMMEDIATE")
        return self.db

    def __exit__(self, exc_type, exc, tb) -> None:
        self.db.execute("ROLLBACK" if exc_type else "COMMIT")
