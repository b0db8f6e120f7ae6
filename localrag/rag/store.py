"""Chroma access for the document index: clients, collections, confirmed deletes, errors in one line.

    store = ChromaStore(config, index_dir, embedder)
    col = store.collection("default-0123456789")            # created with our embedding function
    store.delete_version("default-0123456789", ver)          # returns only once Chroma holds none of it
    store.ensure_fresh("default", lambda: manifest.generation("default"))  # see other processes' writes

Two modes, one code path: a local ``PersistentClient`` under ``<index_dir>/chroma``, or
a shared ``chroma run`` server over HTTP (``config.chroma_host``). Whatever goes wrong
with the server's connection is raised as :class:`StoreUnavailable`, whose message is
one line naming the server's address; a collection that does not exist is ``None``,
never confused with a server that cannot be reached.

Freshness (local mode). Chroma keeps each collection's vector graph in memory per
client, and a client never reloads it when *another process* adds vectors to the same
folder: a long-lived searcher would keep answering from the graph it loaded first. So
one client per folder is shared by every index object of this process (Chroma itself
shares one per folder), and it remembers, per collection, the manifest generation its
graph reflects. This process's own writes go through that client and record their
generation with it (:meth:`ChromaStore.commit`); a newer generation means another
process wrote, and the client is reopened before the next search
(:meth:`ChromaStore.ensure_fresh`). A server (HTTP mode) holds
the only graph, so it is always fresh.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import httpx
from chromadb.errors import NotFoundError

from localrag.rag.config import IndexConfig

READ_PAGE = 2000  # ids per Chroma get when listing a collection
T = TypeVar("T")


class StoreUnavailable(RuntimeError):
    """The Chroma server cannot be reached; ``str(exc)`` is one line naming its address."""


class StoreError(RuntimeError):
    """Chroma answered, but not as promised (e.g. chunks still there after a delete)."""


class _LocalClient:
    """The one PersistentClient of this process for a Chroma folder, and what it has seen."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lock = threading.Lock()
        self.client = None
        self.seen: dict[str, int] = {}  # collection -> manifest generation the open client reflects

    def open(self, generations: dict[str, int]):
        """A fresh client: it loads every graph from disk, so it reflects ``generations``."""
        import chromadb
        from chromadb.api.shared_system_client import SharedSystemClient
        from chromadb.config import Settings

        if self.client is not None:
            # Chroma caches one system per folder; forget it so the next client loads from disk.
            # The old client is not closed: a search on another thread may still be using it,
            # and its close() would release the *new* system, which Chroma files under the same key.
            SharedSystemClient.clear_system_cache()
        self.client = chromadb.PersistentClient(
            path=str(self.path), settings=Settings(anonymized_telemetry=False)
        )
        self.seen = dict(generations)
        return self.client


class _LocalClients:
    """Process-wide registry: Chroma folder -> its shared client (Chroma keeps the same mapping)."""

    lock = threading.Lock()
    by_path: dict[Path, _LocalClient] = {}

    @classmethod
    def get(cls, path: Path) -> _LocalClient:
        key = path.resolve()
        with cls.lock:
            if key not in cls.by_path:
                cls.by_path[key] = _LocalClient(key)
            return cls.by_path[key]


class ChromaStore:
    """The Chroma side of one index folder (or one server); every call raises StoreUnavailable
    rather than a transport error."""

    def __init__(self, config: IndexConfig, index_dir: Path, embedder, emb_fp: str) -> None:
        self.config = config
        self.embedder = embedder
        self.emb_fp = emb_fp
        if config.chroma_host:
            self.address = f"http://{config.chroma_host}:{config.chroma_port}"
            self._local = None
        else:
            self.address = str(index_dir / "chroma")
            self._local = _LocalClients.get(index_dir / "chroma")
        self._http = None

    # ------------------------------------------------------------ clients
    def client(self):
        """The Chroma client (local: the one this process shares for the folder)."""
        if self._local is None:
            if self._http is None:
                self._http = self._connect_http()
            return self._http
        with self._local.lock:
            return self._local.client or self._local.open({})

    def ensure_fresh(self, collection: str, generation: Callable[[], int]) -> None:
        """Before a search: reopen the shared client if another process committed to ``collection``
        since the client loaded it. ``generation`` reads the manifest's current generation."""
        local = self._local
        if local is None:
            return
        with local.lock:
            now = generation()
            if local.client is None:
                local.open({collection: now})
            elif collection not in local.seen:
                # Never searched through this client: its graph loads from disk when first queried.
                local.seen[collection] = now
            elif now > local.seen[collection]:
                local.open({collection: now})

    def commit(self, collection: str, mutate: Callable[[], tuple[T, int]]) -> T:
        """Run a manifest mutation that returns (result, new generation), and note that the shared
        client reflects it (this process wrote through it), with no search reopening the client
        in between; returns the result."""
        if self._local is None:
            return mutate()[0]
        with self._local.lock:
            result, generation = mutate()
            self._local.seen[collection] = generation
        return result

    def _connect_http(self):
        import chromadb
        from chromadb.config import Settings

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
        with self.guard():
            self.client().heartbeat()

    def guard(self):
        """Context manager: transport errors of the HTTP client become StoreUnavailable."""
        return _Guard(self)

    # ------------------------------------------------------------ collections
    def collection(self, space: str, create: bool = True):
        """The Chroma collection for ``space`` with our embedding function (never Chroma's default);
        None when ``create`` is False and it does not exist."""
        with self.guard():
            client = self.client()
            if create:
                return client.get_or_create_collection(
                    space,
                    embedding_function=self.embedder,
                    metadata={
                        "hnsw:space": "cosine",
                        "localrag_collection": self.config.collection,
                        "embedding_model": self.emb_fp,
                    },
                )
            try:
                return client.get_collection(space, embedding_function=self.embedder)
            except NotFoundError:
                return None

    def delete_version(self, space: str, ver: str) -> None:
        """Delete every chunk of one file version; returns only once Chroma holds none of them."""
        with self.guard():
            col = self.collection(space, create=False)
            if col is None:
                return
            col.delete(where={"ver": ver})
            left = col.get(where={"ver": ver}, limit=1, include=[])["ids"]
        if left:
            raise StoreError(f"Chroma still holds chunks of version {ver} after deleting them")

    def ids(self, space: str) -> set[str]:
        """Every chunk id stored in ``space`` (all versions)."""
        with self.guard():
            col = self.collection(space, create=False)
            found: set[str] = set()
            offset = 0
            while col is not None:
                page = col.get(include=[], limit=READ_PAGE, offset=offset)["ids"]
                if not page:
                    break
                found.update(page)
                offset += len(page)
        return found

    def drop_spaces(self, prefix: str, keep: set[str]) -> None:
        """Delete this collection's Chroma collections (``<prefix><10 hex>``) not in ``keep``."""
        with self.guard():
            client = self.client()
            for col in client.list_collections():
                name = col if isinstance(col, str) else col.name
                suffix = name[len(prefix) :]
                ours = len(suffix) == 10 and all(c in "0123456789abcdef" for c in suffix)
                if name.startswith(prefix) and ours and name not in keep:
                    client.delete_collection(name)


class _Guard:
    def __init__(self, store: ChromaStore) -> None:
        self.store = store

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc is not None and self.store._local is None and isinstance(exc, httpx.TransportError):
            raise self.store.unavailable(exc) from exc
        return False
