"""Folders kept in sync: file-system events (watchdog), debounced, replayed through ``DocumentIndex.sync``.

    watcher = FolderWatcher(index_for)          # index_for(collection) -> DocumentIndex
    watcher.start()
    watcher.watch("default", "~/notes")         # remembered in the index; synced now, then on change
    watcher.resume(index.manifest.watches())    # remembered folders: a full sync first, then events
    watcher.states("default")                   # what each folder is doing now
    watcher.stop()

How it works:

- One observer (watchdog; inotify on Linux) per folder path reports created, modified,
  closed-after-write, deleted and moved files and folders; opening or reading a file is not
  asked for, so the ingest's own reads cause no events.
- Events become changed paths per (collection, folder). A folder's paths are synced once no
  event came for ``debounce_s`` (an editor's save is several events), or at the latest
  ``max_delay_s`` after the first (a folder that never rests is still synced).
- One sync thread runs the syncs one at a time: ``DocumentIndex.sync(folder, changed=paths)``,
  the manifest logic of every ingest (added / replaced / moved / removed) under the index's
  write lock. A search never waits for it beyond one batch write (see ``localrag.rag.store``).
- Following a folder starts with a full sync: it catches up with what changed while nothing
  watched (the app was down). Events arriving during it are kept and synced after it.
- A folder that disappears (deleted, unmounted) keeps its documents: it shows as "folder not
  found" and is looked for every ``check_s``; once back, it is followed again (full sync).
  A failed sync (a Chroma server down) is retried, waiting twice as long each time.
- ``stop`` ends a running sync at its next progress event (its committed files stay, the file
  being written is rolled back, as after a crash) and stops the observer.
"""

from __future__ import annotations

import contextlib
import os
import queue
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from watchdog.events import (
    DirCreatedEvent,
    DirDeletedEvent,
    DirMovedEvent,
    FileClosedEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileSystemEvent,
    FileSystemEventHandler,
)
from watchdog.observers import Observer
from watchdog.observers.api import ObservedWatch

from localrag.rag.index import DocumentIndex
from localrag.rag.manifest import WatchRecord
from localrag.rag.records import IngestEvent, IngestReport

__all__ = ["FolderState", "FolderWatcher", "SyncOutcome"]

# Events that can change what a folder holds (directory "modified" only repeats its children's).
EVENTS = [
    FileCreatedEvent,
    FileModifiedEvent,
    FileClosedEvent,
    FileDeletedEvent,
    FileMovedEvent,
    DirCreatedEvent,
    DirDeletedEvent,
    DirMovedEvent,
]
MAX_RETRY_S = 300.0

Key = tuple[str, str]  # (collection, absolute folder)


@dataclass(frozen=True)
class FolderState:
    """What the watcher is doing with one folder.

    state: 'starting' (its first sync is queued), 'syncing' (``detail``: files, chunks/s, ETA),
    'waiting' (another writer holds the index; ``detail`` says which process), 'watching'
    (idle, following events), 'folder not found' (documents kept; looked for again), 'error'
    (``detail``: why; retried). ``syncs``: syncs done since the watcher started following it.
    """

    collection: str
    folder: str
    state: str = "starting"
    detail: str = ""
    syncs: int = 0
    last_report: IngestReport | None = None


@dataclass(frozen=True)
class SyncOutcome:
    """One sync of a watched folder: its report, or the error that stopped it."""

    collection: str
    folder: str
    report: IngestReport | None
    error: str = ""
    full: bool = False


@dataclass
class _Pending:
    """Changes waiting to be synced: ``paths`` None means the whole folder."""

    paths: set[str] | None
    first: float
    last: float
    urgent: bool = False  # a full sync on following a folder: no debounce
    not_before: float = 0.0  # a retry waits for this
    retries: int = 0

    def due(self, debounce_s: float, max_delay_s: float) -> float:
        at = self.first if self.urgent else min(self.last + debounce_s, self.first + max_delay_s)
        return max(at, self.not_before)

    def merge(self, paths: set[str] | None, now: float) -> None:
        self.paths = None if paths is None or self.paths is None else self.paths | paths
        self.last = now


class _Cancelled(Exception):
    """Raised from a sync's progress callback when the watcher stops."""


class _FolderEvents(FileSystemEventHandler):
    """Events under one folder path, for every collection that watches it."""

    def __init__(self, watcher: FolderWatcher, folder: str) -> None:
        self.watcher = watcher
        self.folder = folder
        self.collections: set[str] = set()
        self.watch: ObservedWatch | None = None

    def on_any_event(self, event: FileSystemEvent) -> None:
        # Runs under the observer's lock: hand over and return (never take the watcher's lock here,
        # the watcher holds its own while it schedules on the observer).
        paths = [os.fsdecode(event.src_path)]
        if event.dest_path:
            paths.append(os.fsdecode(event.dest_path))
        self.watcher._inbox.put((self.folder, paths))
        self.watcher._wake.set()


class FolderWatcher:
    """Keeps watched folders of any collection in sync (see the module docstring).

    ``index_for(collection)``: the DocumentIndex to sync into (shared with the caller: the UI's,
    or the CLI's). ``on_progress(collection, folder, event)`` sees every ingest event of a sync,
    ``on_synced(outcome)`` every finished or failed sync; both run on the sync thread.
    """

    def __init__(
        self,
        index_for: Callable[[str], DocumentIndex],
        *,
        debounce_s: float = 1.0,
        max_delay_s: float = 10.0,
        check_s: float = 5.0,
        on_progress: Callable[[str, str, IngestEvent], None] | None = None,
        on_synced: Callable[[SyncOutcome], None] | None = None,
    ) -> None:
        self.index_for = index_for
        self.debounce_s, self.max_delay_s, self.check_s = debounce_s, max_delay_s, check_s
        self.on_progress = on_progress
        self.on_synced = on_synced
        self.completed = 0  # syncs finished since start (the UI refreshes its lists when it moves)
        self._cond = threading.Condition()  # guards everything below; waiters: wait_idle
        self._wake = threading.Event()  # the sync thread waits on this: events, new work, stop
        self._inbox: queue.SimpleQueue[tuple[str, list[str]]] = queue.SimpleQueue()  # from the observer
        self._pending: dict[Key, _Pending] = {}
        self._states: dict[Key, FolderState] = {}
        self._folders: dict[str, _FolderEvents] = {}
        self._running: Key | None = None
        self._cancelled: set[Key] = set()  # their running sync stops at its next progress event
        self._stopping = False
        self._next_check = 0.0
        self._observer = Observer()
        self._thread = threading.Thread(target=self._loop, name="localrag-watch-sync", daemon=True)

    # ------------------------------------------------------------ lifecycle
    def start(self) -> FolderWatcher:
        self._observer.start()
        self._thread.start()
        return self

    def stop(self, timeout: float = 60.0) -> bool:
        """Stop following every folder; a running sync ends at its next progress event. Returns
        False if it did not end within ``timeout`` (it is a daemon thread; the manifest makes
        stopping anywhere safe)."""
        with self._cond:
            self._stopping = True
            self._wake.set()
        self._observer.stop()
        if self._observer.is_alive():
            self._observer.join(timeout)
        if self._thread.is_alive():
            self._thread.join(timeout)
        return not self._thread.is_alive()

    def __enter__(self) -> FolderWatcher:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # ------------------------------------------------------------ folders
    def watch(self, collection: str, folder: str | os.PathLike) -> str:
        """Remember ``folder`` for ``collection`` and follow it (a full sync now, then its events).
        Returns its absolute path; raises ValueError (one line) for a folder that cannot be watched."""
        root = self.index_for(collection).watch(folder)
        self._follow(collection, root)
        return root

    def resume(self, records: Iterable[WatchRecord]) -> None:
        """Follow remembered folders (``Manifest.watches``): each gets a full sync first."""
        for rec in records:
            self._follow(rec.collection, rec.folder)

    def unwatch(self, collection: str, folder: str | os.PathLike, delete: bool = False) -> tuple[bool, int]:
        """Stop following ``folder`` and forget it; its documents stay unless ``delete``. A sync of
        it that is running ends at its next step first (so never call this from the callbacks).
        Returns (whether it was watched, documents removed)."""
        root = os.path.abspath(os.path.expanduser(str(folder)))
        key = (collection, root)
        self._forget(key)
        with self._cond:  # a sync of it now running ends at its next step; wait for that
            self._cancelled.add(key)
            while self._running == key:
                self._cond.wait()
            self._cancelled.discard(key)
        index = self.index_for(collection)
        was = index.unwatch(root)
        return was, index.remove(root) if delete else 0

    def states(self, collection: str | None = None) -> list[FolderState]:
        """The folders this watcher follows (of one collection, or all), by folder."""
        with self._cond:
            return sorted(
                (s for (c, _), s in self._states.items() if collection is None or c == collection),
                key=lambda s: (s.collection, s.folder),
            )

    def wait_idle(self, timeout: float) -> bool:
        """Wait until nothing is pending or running; False on timeout."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._pending or self._running is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def _follow(self, collection: str, root: str) -> None:
        key = (collection, root)
        with self._cond:
            self._states[key] = FolderState(collection, root)
            if not os.path.isdir(root):
                self._set(key, state="folder not found", detail="its documents are kept; looked for again")
                return
            try:
                self._observe(collection, root)
            except OSError as exc:  # e.g. the inotify watch limit (fs.inotify.max_user_watches)
                self._set(key, state="error", detail=f"cannot watch for changes: {exc}; synced at start only")
            self._queue(key, None, urgent=True)

    def _forget(self, key: Key) -> None:
        with self._cond:
            self._pending.pop(key, None)
            self._states.pop(key, None)
            self._unobserve(*key)
            self._cond.notify_all()
            self._wake.set()

    def _observe(self, collection: str, root: str) -> None:
        """Have the observer report events under ``root`` for ``collection`` (caller holds the lock)."""
        handler = self._folders.get(root)
        if handler is None:
            handler = _FolderEvents(self, root)
            handler.watch = self._observer.schedule(handler, root, recursive=True, event_filter=EVENTS)
            self._folders[root] = handler
        handler.collections.add(collection)

    def _unobserve(self, collection: str, root: str, *, all_collections: bool = False) -> None:
        handler = self._folders.get(root)
        if handler is None:
            return
        handler.collections.discard(collection)
        if all_collections or not handler.collections:
            del self._folders[root]
            with contextlib.suppress(KeyError):  # its emitter already went (the folder was deleted)
                self._observer.unschedule(handler.watch)

    # ------------------------------------------------------------ events
    def _take_events(self) -> None:
        """Move the observer's events into the pending syncs (caller holds the lock)."""
        while True:
            try:
                folder, paths = self._inbox.get_nowait()
            except queue.Empty:
                return
            handler = self._folders.get(folder)
            if handler is None:
                continue
            if folder in paths and not os.path.isdir(folder):  # the folder itself went
                self._next_check = 0.0
                continue
            for collection in handler.collections:
                self._queue((collection, folder), set(paths))

    def _queue(self, key: Key, paths: set[str] | None, urgent: bool = False, retry_after: float = 0.0,
               retries: int = 0) -> None:
        """Add changes for ``key`` (caller holds the lock)."""
        now = time.monotonic()
        pending = self._pending.get(key)
        if pending is None:
            self._pending[key] = _Pending(paths, now, now, urgent, now + retry_after, retries)
        else:
            pending.merge(paths, now)
            pending.urgent |= urgent
            pending.not_before = max(pending.not_before, now + retry_after)
            pending.retries = max(pending.retries, retries)
        self._cond.notify_all()
        self._wake.set()

    # ------------------------------------------------------------ syncs (sync thread)
    def _loop(self) -> None:
        while True:
            job = self._next_job()
            if job is None:
                return
            key, pending = job
            try:
                self._sync(key, pending)
            finally:
                with self._cond:
                    self._running = None
                    self._cond.notify_all()

    def _next_job(self) -> tuple[Key, _Pending] | None:
        """The next due sync (waiting for one); None once stopping."""
        while True:
            self._wake.clear()
            with self._cond:
                if self._stopping:
                    return None
                self._take_events()
                now = time.monotonic()
                if now >= self._next_check:
                    self._check_folders()
                    self._next_check = now + self.check_s
                due = {key: p.due(self.debounce_s, self.max_delay_s) for key, p in self._pending.items()}
                ready = [key for key, at in due.items() if at <= now]
                if ready:
                    key = min(ready, key=due.__getitem__)
                    self._running = key
                    return key, self._pending.pop(key)
                timeout = max(0.01, min([*due.values(), self._next_check]) - now)
            self._wake.wait(timeout)

    def _check_folders(self) -> None:
        """Folders that went are marked (documents kept); folders that came back are followed again
        with a full sync. Caller holds the lock."""
        for key, st in list(self._states.items()):
            collection, root = key
            present = os.path.isdir(root)
            if not present and st.state != "folder not found":
                self._pending.pop(key, None)
                self._unobserve(collection, root, all_collections=True)
                self._set(key, state="folder not found", detail="its documents are kept; looked for again")
            elif present and st.state == "folder not found":
                self._set(key, state="starting", detail="")
                try:
                    self._observe(collection, root)
                except OSError as exc:
                    self._set(key, state="error", detail=f"cannot watch for changes: {exc}")
                self._queue(key, None, urgent=True)

    def _sync(self, key: Key, pending: _Pending) -> None:
        collection, root = key
        try:
            index = self.index_for(collection)
            if root not in {w.folder for w in index.manifest.watches(collection)}:
                self._forget(key)  # unwatched elsewhere (another process, or just now)
                return
            if not os.path.isdir(root):
                with self._cond:
                    self._next_check = 0.0  # the folder check marks it (documents kept)
                return
            self._set(key, state="syncing", detail="")
            report = index.sync(root, progress=lambda event: self._progress(key, event), changed=pending.paths)
        except _Cancelled:
            return
        except Exception as exc:  # one folder's trouble must not stop the others; retried
            error = " ".join(f"{type(exc).__name__}: {exc}".split())
            self._failed(key, pending, error)
            return
        with self._cond:
            old = self._states.get(key)
            if old is not None:
                self._states[key] = replace(old, state="watching", detail="", syncs=old.syncs + 1, last_report=report)
            self.completed += 1
        if self.on_synced is not None:
            self.on_synced(SyncOutcome(collection, root, report, full=pending.paths is None))

    def _failed(self, key: Key, pending: _Pending, error: str) -> None:
        collection, root = key
        with contextlib.suppress(Exception):  # the manifest itself failing: the state below says why
            self.index_for(collection).manifest.record_sync(collection, root, error=error)
        with self._cond:
            if key in self._states:
                delay = min(MAX_RETRY_S, self.check_s * 2**pending.retries)
                self._set(key, state="error", detail=f"{error} (retrying in {delay:.0f} s)")
                self._queue(key, pending.paths, urgent=True, retry_after=delay, retries=pending.retries + 1)
        if self.on_synced is not None:
            self.on_synced(SyncOutcome(collection, root, None, error, full=pending.paths is None))

    def _progress(self, key: Key, event: IngestEvent) -> None:
        if self._stopping or key in self._cancelled:
            raise _Cancelled
        if event.kind == "waiting":
            self._set(key, state="waiting", detail=event.reason)
        elif event.kind != "done":
            self._set(key, state="syncing", detail=event.progress_line())
        if self.on_progress is not None:
            self.on_progress(key[0], key[1], event)

    def _set(self, key: Key, **changes) -> None:
        with self._cond:
            old = self._states.get(key)
            if old is not None:
                self._states[key] = replace(old, **changes)
