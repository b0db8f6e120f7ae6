"""Chroma access for the document index: sessions, collections, confirmed deletes, one-line errors.

    store = ChromaStore(config, index_dir, embedder, emb_fp)
    with store.session():
        col = store.collection("default-0123456789")        # created with our embedding function
        col.query(...)
    store.delete_version("default-0123456789", ver)          # returns only once Chroma holds none of it

Two modes, one code path: a local ``PersistentClient`` under ``<index_dir>/chroma``, or
a shared ``chroma run`` server over HTTP (``config.chroma_host``). Whatever goes wrong
with the server's connection is raised as :class:`StoreUnavailable`, whose message is
one line naming the server's address; a collection that does not exist is ``None``,
never confused with a server that cannot be reached.

Sessions (local mode). Chroma's local client is a single-process database: each client
keeps the vector graphs it loaded in memory, applies Chroma's write-ahead log to them
on reads as well as writes, and saves them to disk from time to time. A second process
(the app beside the CLI), or a second client in this one, would answer from a stale
graph and could save it over the other's. So every use of Chroma is a *session*:
under an exclusive lock on ``<index_dir>/chroma.lock`` (across processes) that also
stores an epoch counter, bumped by every session. A process whose client has not seen
the current epoch closes it and opens a fresh one, which loads everything from disk.
One client per folder is shared by every index object of this process. A session
holds the lock only for Chroma calls (never while embedding), so a search waits at
most for one batch write. A server (HTTP mode) is the only process touching its data:
sessions there only translate errors.
"""

from __future__ import annotations

import fcntl
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import chromadb
import httpx
from chromadb.config import Settings
from chromadb.errors import InternalError, NotFoundError

from localrag.rag.config import EMBEDDING_BACKENDS, IndexConfig
from localrag.rag.embed import Embedder, make_embedder

READ_PAGE = 2000  # ids per Chroma get when listing a collection
DELETE_BATCH = 2000  # ids per Chroma delete (under its maximum batch size)
DELETE_ROUNDS = 3  # read-back-and-delete rounds before a version counts as undeletable


class StoreUnavailable(RuntimeError):
    """The Chroma server cannot be reached; ``str(exc)`` is one line naming its address.

    ``report``: when raised by ``DocumentIndex.ingest``, what that ingest had done.
    """

    report = None


class StoreError(RuntimeError):
    """Chroma answered, but not as promised (e.g. chunks still there after a delete)."""


# What Chroma 1.5.9 says, once per process, when its log no longer replays onto the saved vector
# graph (a crash between saving the graph and its id map; docs/design.md, "The vector graph after
# a crash"). Later calls in that process succeed, on an id map that may give one slot to two ids.
DAMAGE_MARK = "Failed to apply logs to the hnsw segment writer"
Damaged = Callable[[str, str], None]  # (space, Chroma's message): a space's vector index is damaged


class StoreDamaged(StoreError):
    """Chroma reported a space's vector index damaged in the middle of a call (a server restarted
    after a crash); the message is one line with the command that repairs it."""


class _LocalClient:
    """The one PersistentClient of this process for an index folder, and the epoch it reflects."""

    def __init__(self, index_dir: Path) -> None:
        self.chroma_dir = index_dir / "chroma"
        self.lock_path = index_dir / "chroma.lock"
        self.mutex = threading.RLock()  # one session at a time in this process (re-entrant)
        self.depth = 0
        self.client = None
        self.epoch = -1  # the epoch the open client reflects
        self.users = 0  # ChromaStore objects of this process using it
        self.opened = 0  # clients opened so far (each loads the graphs from disk anew)

    @contextmanager
    def session(self) -> Iterator[None]:
        with self.mutex:
            if self.depth:
                self.depth += 1
                try:
                    yield
                finally:
                    self.depth -= 1
                return
            with open(self.lock_path, "a+") as fh:
                fcntl.flock(fh, fcntl.LOCK_EX)
                try:
                    fh.seek(0)
                    text = fh.read().strip()
                    epoch = int(text) if text.isdigit() else 0
                    if self.client is None or epoch != self.epoch:
                        self._reopen()
                    self.depth = 1
                    try:
                        yield
                    finally:
                        self.depth = 0
                        # Reads may compact and save too: every session moves the epoch on.
                        self.epoch = epoch + 1
                        fh.seek(0)
                        fh.truncate()
                        fh.write(str(self.epoch))
                        fh.flush()
                finally:
                    fcntl.flock(fh, fcntl.LOCK_UN)

    def _reopen(self) -> None:
        """Close the client (its system stops; nothing else in this process holds it) and open one
        that loads every graph from disk."""
        if self.client is not None:
            self.client.close()
            self.client = None
        self.client = chromadb.PersistentClient(
            path=str(self.chroma_dir), settings=Settings(anonymized_telemetry=False)
        )
        self.opened += 1


class _LocalClients:
    """Process-wide registry: index folder -> its shared client (Chroma keeps the same mapping)."""

    lock = threading.Lock()
    by_dir: dict[Path, _LocalClient] = {}

    @classmethod
    def acquire(cls, index_dir: Path) -> _LocalClient:
        key = index_dir.resolve()
        with cls.lock:
            local = cls.by_dir.setdefault(key, _LocalClient(key))
            local.users += 1
            return local

    @classmethod
    def release(cls, local: _LocalClient) -> None:
        """The last user of a folder's client closes it (its files, its graphs in memory)."""
        with cls.lock, local.mutex:
            local.users -= 1
            if local.users == 0:
                cls.by_dir.pop(local.chroma_dir.parent, None)
                if local.client is not None:
                    local.client.close()
                    local.client = None


class ChromaStore:
    """The Chroma side of one index folder (or one server). Chroma objects are used only inside
    :meth:`session`, which turns transport errors into StoreUnavailable."""

    def __init__(self, config: IndexConfig, index_dir: Path, embedder: Embedder, emb_fp: str,
                 on_damaged: Damaged | None = None) -> None:
        """``on_damaged``: told when Chroma reports a space's vector index damaged (the index records
        it, so an ingest or ``check --repair`` rebuilds the space)."""
        self.config = config
        self.embedder = embedder
        self.emb_fp = emb_fp
        self.on_damaged = on_damaged
        self._probed: set[tuple[int, str]] = set()  # (client opening, space) pairs whose log replayed
        self._space: str | None = None  # the space last opened (what a damage report inside a call is about)
        if config.chroma_host:
            self.address = f"http://{config.chroma_host}:{config.chroma_port}"
            self._local = None
        else:
            self.address = str(index_dir / "chroma")
            self._local = _LocalClients.acquire(index_dir)
        self._http = None
        self._closed = False

    # ------------------------------------------------------------ sessions
    @contextmanager
    def session(self) -> Iterator[None]:
        """Use Chroma inside this (re-entrant): local mode holds the cross-process lock and a
        client that reflects every other process's sessions; HTTP errors become StoreUnavailable."""
        try:
            if self._local is None:
                try:
                    yield
                except httpx.TransportError as exc:
                    raise self.unavailable(exc) from exc
                return
            if self._closed:
                raise RuntimeError("this index was closed")
            with self._local.session():
                yield
        except InternalError as exc:  # the probe in ``collection`` missed it (a server restarted since)
            if DAMAGE_MARK not in str(exc) or self._space is None:
                raise
            if self.on_damaged is not None:
                self.on_damaged(self._space, " ".join(str(exc).split()))
            raise StoreDamaged(f"the vector index of {self._space} at {self.address} was damaged by a crash; "
                               "run `python -m localrag check --repair` (the next ingest repairs it too)") from exc

    def close(self) -> None:
        """Release the shared local client (closed with its last user); a no-op for a server."""
        if self._local is not None and not self._closed:
            self._closed = True
            _LocalClients.release(self._local)

    def client(self):
        """The Chroma client (call inside a session)."""
        if self._local is not None:
            assert self._local.depth, "Chroma is used outside a session"
            return self._local.client
        if self._http is None:
            self._http = self._connect_http()
        return self._http

    def _connect_http(self):
        try:
            return chromadb.HttpClient(
                host=self.config.chroma_host,
                port=self.config.chroma_port,
                settings=Settings(anonymized_telemetry=False),
            )
        except ValueError as exc:  # Chroma's wording for a refused connection at construction
            raise self.unavailable(exc) from exc
        except httpx.TransportError as exc:
            raise self.unavailable(exc) from exc

    def unavailable(self, exc: BaseException) -> StoreUnavailable:
        reason = " ".join(str(exc).split()) or type(exc).__name__
        return StoreUnavailable(f"Chroma server at {self.address} is unreachable ({reason})")

    def check(self) -> None:
        """Raise StoreUnavailable now if the server does not answer (before touching the manifest)."""
        with self.session():
            self.client().heartbeat()

    # ------------------------------------------------------------ collections
    def collection(self, space: str, create: bool = True):
        """The Chroma collection for ``space`` with our embedding function (never Chroma's default);
        None when ``create`` is False and it does not exist. Use it inside the same session.

        The first use of a space by a client replays Chroma's log onto its saved vector graph; that
        is where a damaged index shows (DAMAGE_MARK), so it is probed with a count then: the damage
        is reported to ``on_damaged`` and the collection is handed out (Chroma serves it again)."""
        with self.session():
            col = self._open_collection(space, create)
            self._space = space
            key = (self._local.opened if self._local is not None else 0, space)
            if col is not None and key not in self._probed:
                try:
                    col.count()
                except InternalError as exc:
                    if DAMAGE_MARK not in str(exc):
                        raise
                    if self.on_damaged is not None:
                        self.on_damaged(space, " ".join(str(exc).split()))
                self._probed.add(key)
            return col

    def forget(self, space: str) -> None:
        """The space was replaced (rebuilt): probe it again at its next use."""
        self._probed = {key for key in self._probed if key[1] != space}

    def _open_collection(self, space: str, create: bool):
        with self.session():
            client = self.client()
            if create:
                return client.get_or_create_collection(
                    space,
                    embedding_function=self.embedder,
                    metadata={
                        "hnsw:space": "cosine",
                        # Chroma's default search breadth (10) misses live vectors once many have been
                        # deleted (a replaced or half-written file leaves its nodes marked in the graph):
                        # measured as "unreachable vectors" after a server killed mid-ingest. 100 keeps
                        # every stored vector findable at a cost of well under a millisecond per query
                        # on document-sized collections.
                        "hnsw:search_ef": 100,
                        "localrag_collection": self.config.collection,
                        "embedding_model": self.emb_fp,
                    },
                )
            # A space of an earlier embedding model or backend (being migrated or dropped) was made
            # with that backend's embedding function, and Chroma refuses to open it with another.
            # Only ids and stored vectors are read there, so the backends' functions are tried in
            # turn (they load no model until asked to embed).
            for ef in self._embedding_functions():
                try:
                    return client.get_collection(space, embedding_function=ef)
                except NotFoundError:
                    return None
                except ValueError as exc:
                    if "Embedding function conflict" not in str(exc):
                        raise
            raise RuntimeError(f"Chroma collection {space} was made by an embedding function localrag does not know")

    def _embedding_functions(self) -> Iterator[Embedder]:
        yield self.embedder
        for backend in EMBEDDING_BACKENDS:
            if backend != self.embedder.backend:
                yield make_embedder(self.config.model_path, backend)

    def delete_version(self, space: str, ver: str) -> None:
        """Delete every chunk of one file version; returns only once Chroma holds none of them.

        Deletes by id, after reading the ids back: a delete by metadata filter misses chunks a
        killed writer logged but Chroma had not yet applied, which a read applies first.
        """
        with self.session():
            col = self.collection(space, create=False)
            if col is None:
                return
            for _ in range(DELETE_ROUNDS):
                ids = col.get(where={"ver": ver}, include=[])["ids"]
                if not ids:
                    return
                for start in range(0, len(ids), DELETE_BATCH):
                    col.delete(ids=ids[start : start + DELETE_BATCH])
        raise StoreError(f"Chroma still holds chunks of version {ver} after deleting them {DELETE_ROUNDS} times")

    def ids(self, space: str) -> set[str]:
        """Every chunk id stored in ``space`` (all versions)."""
        found: set[str] = set()
        with self.session():
            col = self.collection(space, create=False)
            offset = 0
            while col is not None:
                page = col.get(include=[], limit=READ_PAGE, offset=offset)["ids"]
                if not page:
                    break
                found.update(page)
                offset += len(page)
        return found

    def space_names(self) -> set[str]:
        with self.session():
            return {c if isinstance(c, str) else c.name for c in self.client().list_collections()}

    def drop_spaces(self, prefix: str, keep: set[str]) -> None:
        """Delete this collection's Chroma collections (``<prefix><10 hex>``) not in ``keep``."""
        with self.session():
            for name in self.space_names():
                suffix = name[len(prefix) :]
                ours = len(suffix) == 10 and all(c in "0123456789abcdef" for c in suffix)
                if name.startswith(prefix) and ours and name not in keep:
                    self.client().delete_collection(name)
