"""UI handlers as plain classes: chat (stream, stop, regenerate, history) and documents (ingest, list, remove).

They return plain values (messages, Markdown, rows) that ``layout.py`` maps
onto Gradio components, so tests drive them without a browser. Nothing here
raises into the UI: every failure becomes a message the user can read.

    chat = ChatController(services)
    for view in chat.respond(None, "What is in the report?", Settings()):
        print(view.messages[-1]["content"])
    docs = DocsController(services)
    for view in docs.ingest(["/tmp/upload/a.md"], "default"):
        print(view.summary)
"""

from __future__ import annotations

import os
import queue
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from localrag.app.history import ChatInfo, Turn, make_title
from localrag.app.services import Services
from localrag.app.serving import QueueFull, Ticket, ordinal
from localrag.models import ModelError, inspect_gguf, list_models, resolve
from localrag.modes import option_fields
from localrag.rag.config import IndexConfig
from localrag.rag.records import IngestEvent, WatchedFolder
from localrag.rag.watch import FolderState
from localrag.results import AnswerProgress, AnswerResult
from localrag.ui.render import (
    PENDING,
    accepted_per_step,
    chat_messages,
    display_path,
    llm_history,
    mode_label,
)
from localrag.ui.settings import DRAFT_AUTO, NO_DRAFT, Settings
from localrag.ui.uploads import UploadError, inside, stage_uploads

STREAM_EVERY_S = 0.05  # at most ~20 UI updates a second while streaming
WAIT_POLL_S = 0.5  # how often a waiting answer refreshes its place in line


@dataclass
class ChatView:
    """Everything the chat area shows after one update."""

    messages: list[dict]
    chat_id: int | None
    steps: list[int] = field(default_factory=list)
    busy: bool = False
    note: str = ""


def history_choices(services: Services, now: float | None = None) -> list[tuple[str, int]]:
    """Sidebar entries: "title · mode · when" (the time alone today, else the date too)."""
    return [(chat_label(c, now), c.id) for c in services.history.list_chats()]


def chat_label(chat: ChatInfo, now: float | None = None) -> str:
    at = time.localtime(chat.updated)
    today = time.localtime(time.time() if now is None else now)[:3] == at[:3]
    when = time.strftime("%H:%M" if today else "%d %b %H:%M", at)
    return " · ".join(p for p in (chat.title, mode_label(chat.mode) if chat.mode else "", when) if p)


class ChatController:
    def __init__(self, services: Services) -> None:
        self.s = services

    def load(self, chat_id: int | None) -> ChatView:
        turns = self.s.history.turns(chat_id)
        steps = accepted_per_step(turns[-1].stats) if turns else []
        return ChatView(chat_messages(turns), chat_id, steps)

    def stop(self, owner: str = "") -> None:
        """Stop the answers of one browser session (``owner``), waiting or running; others go on."""
        self.s.queue.cancel(owner)

    def regenerate(self, chat_id: int | None, settings: Settings, owner: str = "") -> Iterator[ChatView]:
        last = self.s.history.pop_last_turn(chat_id) if chat_id is not None else None
        if last is None:
            yield ChatView(chat_messages(self.s.history.turns(chat_id)), chat_id, note="Nothing to regenerate.")
            return
        yield from self.respond(chat_id, last.question, settings, owner)

    def respond(self, chat_id: int | None, question: str, settings: Settings,
                owner: str = "") -> Iterator[ChatView]:
        """Stream one answer; the finished turn (or its error) is saved to the history.

        owner: the browser session asking; its Stop cancels this answer only. While other answers
        use the model, the pending answer shows its place in line."""
        question = (question or "").strip()
        if chat_id is not None and not self.s.history.exists(chat_id):
            chat_id = None
        previous = self.s.history.turns(chat_id)
        if not question:
            yield ChatView(chat_messages(previous), chat_id, note="Type a question first.")
            return
        if chat_id is None:
            chat_id = self.s.history.new_chat(make_title(question))
        turn = Turn(question=question, mode=settings.mode, collection=settings.collection)
        shown = chat_messages(previous)

        def view(busy: bool = True, status: str = "") -> ChatView:
            msgs = chat_messages([turn])
            if status and msgs[1]["content"] == PENDING:  # the pending answer shows why it waits
                msgs[1] = {**msgs[1], "content": status}
            return ChatView(shown + msgs, chat_id, accepted_per_step(turn.stats), busy)

        yield view()
        ok, why = self.s.mode_status(settings.mode)
        if not ok:
            turn.error = f"{self.s.mode_label(settings.mode)} is unavailable: {why}"
            self.s.history.add_turn(chat_id, turn)
            yield view(False)
            return
        try:
            ticket = self.s.queue.submit(owner)
        except QueueFull as exc:
            turn.error = f"{exc}; try again in a moment."
            self.s.history.add_turn(chat_id, turn)
            yield view(False)
            return
        try:
            while not self.s.queue.wait_turn(ticket, timeout=WAIT_POLL_S):
                if ticket.cancelled:
                    turn.notes.append("Stopped before it started.")
                    break
                yield view(status=f"⏳ waiting: {ordinal(self.s.queue.position(ticket))} in line")
            else:
                yield from self._answer(turn, previous, settings, ticket, view)
        except Exception as exc:  # any failure becomes a message, never a traceback in the page
            turn.error = f"{type(exc).__name__}: {exc}"
        finally:
            self.s.queue.release(ticket)
        turn.answer = turn.answer.strip()
        self.s.history.add_turn(chat_id, turn)
        yield view(False)

    def _answer(self, turn: Turn, previous: list[Turn], settings: Settings, ticket: Ticket,
                view: Callable[[], ChatView]) -> Iterator[ChatView]:
        """Our turn: stream the mode's answer into ``turn``. A Stop (the ticket's cancel flag)
        ends the writing, and the mode's result still brings the sources and the stats."""
        self.s.ensure_embedder()
        index = self.s.index(settings.collection)
        if not index.list_documents():
            turn.notes.append(f"Collection “{settings.collection}” has no documents yet; answered "
                              "without documents. Upload files under Documents.")
        last = 0.0
        request = self.s.request(settings.mode, turn.question, llm_history(previous), settings.generation(),
                                 settings.collection, settings.option_values(), cancel=ticket.cancel)
        for item in self.s.stream(settings.mode, request):
            if isinstance(item, AnswerResult):
                item.stats.waited_s = ticket.waited_s
                turn.take(item)
            elif isinstance(item, AnswerProgress):  # the pending answer says what the mode is doing
                yield view(status=f"⏳ {item.message}")
            else:
                turn.answer += item
                if time.perf_counter() - last >= STREAM_EVERY_S:
                    last = time.perf_counter()
                    yield view()
        if ticket.cancelled:
            turn.notes.append("Stopped.")


@dataclass
class DocsView:
    rows: list[list]  # per-file results of the running ingest: name, status, chunks, reason
    summary: str
    done: bool = False


class DocsController:
    def __init__(self, services: Services) -> None:
        self.s = services

    def documents(self, collection: str) -> list[list]:
        """The document list: name, chunks, status, reason."""
        try:
            docs = self.s.index(collection).list_documents()
        except Exception as exc:
            return [[f"error: {exc}", 0, "error", ""]]
        up = self.s.uploads_dir
        return [[display_path(d.path, up), d.chunks, d.status, d.reason] for d in docs]

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

    def check_collection(self, name: str) -> str:
        """'' when usable, else why not (names are letters, digits, '-' and '_')."""
        try:
            IndexConfig(index_dir=self.s.config.index_dir, collection=(name or "").strip())
        except ValueError as exc:
            return str(exc)
        return ""

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
        return f"Removed {display_path(path, self.s.uploads_dir)}." if n else f"{Path(path).name} was not indexed."

    def ingest(self, uploads: Sequence[str] | None, collection: str,
               names: Sequence[str] | None = None) -> Iterator[DocsView]:
        """Stage uploads under the data directory and ingest them, yielding per-file progress."""
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
        shown = {str(p.resolve()): name for name, p in staged}
        rows: dict[str, list] = {key: [name, "queued", 0, ""] for key, name in shown.items()}
        yield DocsView(list(rows.values()), f"Staged {len(staged)} file(s); loading the embedding model…")
        events: queue.Queue = queue.Queue()
        result: dict = {}

        def work() -> None:
            try:
                self.s.ensure_embedder()
                result["report"] = self.s.index(collection).ingest([p for _, p in staged], progress=events.put)
            except Exception as exc:
                result["error"] = f"{type(exc).__name__}: {exc}"
            finally:
                events.put(None)

        threading.Thread(target=work, name="localrag-ingest", daemon=True).start()
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
                yield DocsView(list(rows.values()), ingest_status(ev))
        if "error" in result:
            yield DocsView(list(rows.values()), f"❌ Ingest failed: {result['error']}", True)
            return
        r = result["report"]
        parts = [f"{r.added} added", f"{r.skipped} skipped (unchanged)", f"{r.replaced} replaced",
                 f"{len(r.failed)} failed", f"{r.chunks} chunks", f"{r.seconds:.1f} s"]
        icon = "⚠️" if r.failed else "✅"
        yield DocsView(list(rows.values()), f"{icon} Done: " + ", ".join(parts), True)

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


class SettingsController:
    """Mode availability, model and draft pickers fed by the registry, model loading."""

    def __init__(self, services: Services) -> None:
        self.s = services

    def mode_note(self, mode: str, draft: str = "") -> str:
        lines = []
        for key, m in self.s.modes.items():
            ok, why = self.s.mode_status(key)
            mark = "✅" if ok else "⛔"
            lines.append(f"- {mark} **{m.label}**" + ("" if ok else f" — unavailable: {why}"))
        ok, why = self.s.mode_status(mode)
        label = self.s.mode_label(mode)
        head = f"Mode **{label}** is ready." if ok else f"⛔ **{label} is unavailable**: {why}"
        takes_draft = ok and any(f.name == "draft" for f in option_fields(self.s.mode(mode).options_type))
        if takes_draft and draft:
            note = self.draft_note(draft)
            if note:
                head += f"\n\n{note}"
        return head + "\n\n" + "\n".join(lines)

    def models(self) -> tuple[list[str], list[str]]:
        """(usable model names, 'name: why' for unusable ones) from the registry."""
        usable, bad = [], []
        try:
            found = list_models()
        except Exception as exc:
            return [], [f"registry failed: {exc}"]
        for m in found:
            if isinstance(m, ModelError):
                bad.append(str(m))
            else:
                usable.append(m.name)
        return usable, bad

    def _vocab(self, name: str) -> int | None:
        spec = resolve(name)
        return inspect_gguf(spec.path).vocab_size if spec.format == "gguf" else None

    def draft_note(self, draft: str) -> str:
        """Why a draft model cannot serve the loaded target ('' when it can or none is chosen)."""
        if not draft or draft == NO_DRAFT or self.s.engine is None:
            return ""
        if draft == DRAFT_AUTO:
            paired = self.s.default_draft()
            if paired is None:
                return (f"ℹ️ No draft model is paired with **{self.s.engine.model_name}** in the registry: "
                        "Speedup speculates from retrieval alone.")
            draft = paired
        try:
            dv, tv = self._vocab(draft), self._vocab(self.s.model_config.model)
        except Exception as exc:
            return f"⚠️ Draft **{draft}** is unusable: {exc}"
        if dv is not None and tv is not None and dv != tv:
            return (f"⚠️ Draft **{draft}** is unusable with **{self.s.engine.model_name}**: different "
                    f"vocabularies ({dv} vs {tv} tokens). Speedup will speculate from retrieval only.")
        if draft == self.s.model_config.model:
            return f"ℹ️ Draft **{draft}** is the target model itself: correct, but no faster."
        return f"Draft **{draft}** shares the target's vocabulary ({dv} tokens)."

    def load_model(self, name: str, gpu_layers: int) -> str:
        if not name:
            return "Pick a model first."
        return self.s.swap_model(name, gpu_layers)
