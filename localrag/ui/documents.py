"""The Documents tab's handlers: ingest with per-file progress (stopped and continued per browser
session), the document list with failed files apart, remove, watched folders.

They return plain values (rows, Markdown) that ``layout.py`` maps onto Gradio components; nothing
here raises into the UI: every failure becomes a message the user can read.

    docs = DocsController(services)
    for view in docs.ingest(["/tmp/upload/a.md"], "default", owner="tab-1"):
        print(view.summary)                 # docs.stop_ingest("tab-1") from another thread stops it
    for view in docs.resume("tab-1"):       # what a stopped ingest did not do
        ...
"""

from __future__ import annotations

import os
import queue
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from localrag.app.services import Services
from localrag.app.uploads import UploadError, collection_error, inside, stage_uploads
from localrag.rag.records import IngestEvent, WatchedFolder
from localrag.rag.watch import FolderState
from localrag.ui.render import display_path
from localrag.ui.settings import Settings


@dataclass
class DocsView:
    rows: list[list]  # per-file results of the running ingest: name, status, chunks, reason
    summary: str
    done: bool = False
    resumable: bool = False  # a stopped ingest left files not done: ``resume`` does them
    collection: str = ""  # the collection it writes to ('' before it started)


EMPTY_PLACEHOLDER = "Drop documents on the right, then ask."
NOT_DONE = "not done"  # the status of a file a stopped ingest did not do


class DocsController:
    """The Documents tab. Ingests are per browser session (``owner``): its Stop button stops its own
    ingest, and what that ingest did not do waits for its Continue."""

    def __init__(self, services: Services) -> None:
        self.s = services
        self._lock = threading.Lock()
        self._cancels: dict[str, set[threading.Event]] = {}  # owner -> the cancel events of its running ingests
        self._left: dict[str, tuple[str, list[tuple[str, Path]]]] = {}  # owner -> (collection, files not done)

    def documents(self, collection: str) -> list[list]:
        """The document list: name, chunks, status (failed files are listed apart: ``failed``)."""
        try:
            docs = self.s.index(collection).list_documents()
        except Exception as exc:
            return [[f"error: {exc}", 0, "error"]]
        up = self.s.uploads_dir
        return [[display_path(d.path, up), d.chunks, d.status] for d in docs if d.status != "failed"]

    def failed(self, collection: str) -> list[list]:
        """Files whose last ingest failed: name, reason."""
        try:
            docs = self.s.index(collection).list_documents()
        except Exception:
            return []
        return [[display_path(d.path, self.s.uploads_dir), d.reason] for d in docs if d.status == "failed"]

    def placeholder(self, collection: str) -> str:
        """What the empty chat says: drop documents first, or ask about the ones the collection has."""
        try:
            n = sum(1 for d in self.s.index(collection).list_documents() if d.status != "failed")
        except Exception:
            n = 0
        if not n:
            return EMPTY_PLACEHOLDER
        docs = "1 document" if n == 1 else f"{n} documents"
        return f"Ask about your {docs} in “{collection}”."

    def document_choices(self, collection: str) -> list[tuple[str, str]]:
        try:
            docs = self.s.index(collection).list_documents()
        except Exception:
            return []
        return [(display_path(d.path, self.s.uploads_dir), d.path) for d in docs]

    def collections(self) -> list[str]:
        try:
            return self.s.collections()
        except Exception:
            return [Settings().collection]

    def cache_note(self, collection: str) -> str:
        """How many of the collection's chunks a new question finds in the chunk cache (the
        approximate prefill's), once it has been counted; '' before."""
        r = self.s.chunk_readiness(collection)
        if r is None:
            return ""
        if r.note:
            return f"⚡ Chunk cache: {r.note}"
        full = " (the chunk cache is full: raise its cap, or `localrag cache --clear`)" if r.full else ""
        return f"⚡ Ready for fast answers (reuse prefill): {r.ready} of {r.total} chunks{full}"

    def prefill_changed(self, prefill: str, collection: str) -> str:
        """The page's prefill switched: to reuse, the collection's chunk caches start warming."""
        if prefill == "reuse":
            self.s.warm_chunk_cache(collection)
        return self.cache_note(collection)

    def check_collection(self, name: str) -> str:
        """'' when usable, else why not (names are letters, digits, '-' and '_')."""
        return collection_error((name or "").strip())

    def remove(self, collection: str, path: str) -> str:
        if not path:
            return "Pick a document to remove."
        try:
            n = self.s.index(collection).remove(path)
        except Exception as exc:
            return f"❌ Could not remove {Path(path).name}: {exc}"
        target = Path(path)
        if target.is_file() and str(target.resolve()).startswith(str(self.s.uploads_dir.resolve())):
            target.unlink()  # our own staged copy; never the user's files elsewhere
        if n:
            self.s.documents_changed(collection)
        return f"Removed {display_path(path, self.s.uploads_dir)}." if n else f"{Path(path).name} was not indexed."

    def ingest(self, uploads: Sequence[str] | None, collection: str,
               names: Sequence[str] | None = None, owner: str = "") -> Iterator[DocsView]:
        """Stage uploads under the data directory and ingest them, yielding per-file progress.
        ``owner``: the browser session; its ``stop_ingest`` stops this ingest."""
        paths = [str(p) for p in (uploads or []) if p]
        if not paths:
            yield DocsView([], "Drop files or a folder first.", True)
            return
        why = self.check_collection(collection)
        if why:
            yield DocsView([], f"❌ {why}", True)
            return
        try:
            staged = stage_uploads(paths, self.s.uploads_dir / collection, names)
        except (UploadError, OSError) as exc:
            yield DocsView([], f"❌ {exc}", True)
            return
        finally:  # our staged copy is what the index cites; Gradio's temp copy is no longer needed
            discard_upload_temps(paths, self.s.config.upload_temp_dir)
        yield from self._run(staged, collection, owner)

    def stop_ingest(self, owner: str = "") -> str:
        """Stop the running ingests of ``owner`` at their next batch: what is done stays."""
        with self._lock:
            events = list(self._cancels.get(owner, ()))
        for event in events:
            event.set()
        return "⏹ Stopping at the next batch…" if events else "No ingest is running."

    def resume(self, owner: str = "") -> Iterator[DocsView]:
        """Ingest what the last stopped ingest of ``owner`` did not do (its files stay staged)."""
        with self._lock:
            left = self._left.pop(owner, None)
        if left is None:
            yield DocsView([], "Nothing to continue: no stopped ingest left files undone.", True)
            return
        collection, staged = left
        yield from self._run([(n, p) for n, p in staged if p.is_file()], collection, owner)

    def _run(self, staged: list[tuple[str, Path]], collection: str, owner: str) -> Iterator[DocsView]:
        """Ingest staged files, yielding per-file progress; a Stop ends it at a batch boundary."""
        shown = {str(p.resolve()): name for name, p in staged}
        rows: dict[str, list] = {key: [name, "queued", 0, ""] for key, name in shown.items()}
        yield DocsView(list(rows.values()), f"Staged {len(staged)} file(s); loading the embedding model…",
                       collection=collection)
        events: queue.Queue = queue.Queue()
        result: dict = {}
        cancel = threading.Event()
        with self._lock:
            self._cancels.setdefault(owner, set()).add(cancel)

        def work() -> None:
            try:
                self.s.ensure_embedder()
                result["report"] = self.s.index(collection).ingest([p for _, p in staged], progress=events.put,
                                                                   cancel=cancel)
            except Exception as exc:
                result["error"] = f"{type(exc).__name__}: {exc}"
            finally:
                events.put(None)

        threading.Thread(target=work, name="localrag-ingest", daemon=True).start()
        try:
            while True:
                ev = events.get()
                if ev is None:
                    break
                key = ev.path
                if key and key not in rows:
                    rows[key] = [display_path(key, self.s.uploads_dir), "queued", 0, ""]
                if ev.kind == "file_start":
                    rows[key][1] = "reading…"
                elif ev.kind == "chunks":
                    rows[key][1], rows[key][2] = "embedding…", ev.chunks
                elif ev.kind == "file_done":
                    rows[key][1:] = [ev.status, ev.chunks, ev.reason]
                if ev.kind != "done":
                    summary = ingest_status(ev)
                    yield DocsView(list(rows.values()), f"⏹ Stopping at the next batch… ({summary})"
                                   if cancel.is_set() else summary, collection=collection)
        finally:
            with self._lock:
                self._cancels.get(owner, set()).discard(cancel)
        with self._lock:
            resumable = owner in self._left  # an earlier stopped ingest still waits for its Continue
        if "error" in result:
            yield DocsView(list(rows.values()), f"❌ Ingest failed: {result['error']}", True, resumable, collection)
            return
        r = result["report"]
        if r.added or r.replaced:
            self.s.documents_changed(collection)
        parts = [f"{r.added} added", f"{r.skipped} skipped (unchanged)", f"{r.replaced} replaced",
                 f"{len(r.failed)} failed", f"{r.chunks} chunks", f"{r.seconds:.1f} s"]
        if r.stopped:
            left = [(shown.get(str(Path(p).resolve()), Path(p).name), Path(p)) for p in r.not_done]
            for _, p in left:
                row = rows.setdefault(str(p.resolve()), [display_path(str(p), self.s.uploads_dir), "", 0, ""])
                row[1:] = [NOT_DONE, 0, "stopped before it was indexed: ▶ Continue indexes it"]
            with self._lock:
                self._left[owner] = (collection, left)
            yield DocsView(list(rows.values()), f"⏹ Stopped: {', '.join(parts)}; {len(left)} not done "
                           "(▶ Continue indexes them)", True, True, collection)
            return
        icon = "⚠️" if r.failed else "✅"
        yield DocsView(list(rows.values()), f"{icon} Done: " + ", ".join(parts), True, resumable, collection)

    # ------------------------------------------------------------ watched folders
    def watch_folder(self, collection: str, path: str) -> str:
        """Remember a folder of this machine and keep it in sync with ``collection``."""
        if not self.s.serves_this_machine_only:
            return ("❌ Watching a folder by its path is offered only when the app serves this machine alone "
                    "(127.0.0.1, no share link). Use `python -m localrag watch PATH` on the machine instead.")
        why = self.check_collection(collection)
        if why:
            return f"❌ {why}"
        path = (path or "").strip()
        if not path:
            return "Type the path of a folder on this machine first."
        try:
            root = self.s.watcher.watch(collection.strip(), path)
        except (ValueError, OSError) as exc:
            return f"❌ Cannot watch {path}: {exc}"
        return (f"👁 Keeping `{root}` in sync with “{collection}”: it is synced now, and later changes "
                "show within seconds. The app follows it again at every start.")

    def unwatch_folder(self, collection: str, folder: str, delete: bool = False) -> str:
        """Stop keeping a folder in sync; its documents stay unless ``delete``."""
        if not folder:
            return "Pick a watched folder first."
        try:
            was, removed = self.s.watcher.unwatch(collection, folder, delete)
        except Exception as exc:
            return f"❌ Could not stop watching {folder}: {exc}"
        if not was:
            return f"{folder} was not watched."
        kept = f"removed its {removed} document(s)." if delete else "its documents stay in the collection."
        return f"Stopped watching `{folder}`; {kept}"

    def watched(self, collection: str) -> list[list]:
        """Watched folders: folder, what the app is doing with it, files indexed, failed files with
        their reasons, last sync."""
        try:
            folders = self.s.index(collection).watched_folders()
        except Exception as exc:
            return [[f"error: {exc}", "", 0, "", ""]]
        live = {st.folder: st for st in self.s.watch_states(collection)}
        return [[w.folder, watch_state(w, live.get(w.folder)), w.indexed,
                 "\n".join(f"{os.path.relpath(p, w.folder)}: {r}" for p, r in w.failed),
                 "never" if w.last_sync is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(w.last_sync))]
                for w in folders]

    def watched_choices(self, collection: str) -> list[str]:
        try:
            return [w.folder for w in self.s.index(collection).watched_folders()]
        except Exception:
            return []


def ingest_status(event: IngestEvent) -> str:
    """The summary line while an ingest runs: files done of all, chunks/s and the ETA, or the wait
    for another writer (which process holds the index's write lock)."""
    if event.kind == "waiting":
        return f"⏳ Waiting for the write lock: {event.reason}"
    if event.kind == "repair":  # the vector index checked or repaired around the run (after a crash)
        return f"🔧 {event.reason[:1].upper()}{event.reason[1:]}"
    return f"Ingesting: {event.progress_line()}"


def watch_state(folder: WatchedFolder, live: FolderState | None) -> str:
    """'watching', 'syncing: 3/10 files · …', 'folder not found: …'; a folder this app does not
    follow (remembered by another process) says so, with the last error if there was one."""
    if live is None:
        why = f" (last attempt failed: {folder.last_error})" if folder.last_error else ""
        return "not followed by this app: add it again here, or restart the app" + why
    return f"{live.state}: {live.detail}" if live.detail else live.state


def discard_upload_temps(paths: Sequence[str], temp_dir: Path) -> None:
    """Delete the browser's uploaded copies under ``temp_dir`` (Gradio's ``<hash>/<name>``) and
    the folders they leave empty; files anywhere else are never touched."""
    root = Path(temp_dir).resolve()
    for p in paths:
        path = Path(p)
        if not path.is_file() or path.is_symlink() or not inside(path, root):
            continue
        path.unlink()
        folder = path.resolve().parent
        while folder != root and inside(folder, root) and not any(folder.iterdir()):
            folder.rmdir()
            folder = folder.parent
