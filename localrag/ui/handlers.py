"""UI handlers as plain classes: chat (stream, stop, regenerate, history) and settings (modes,
models, drafts); the Documents tab's are in ``documents``, the source viewer's in ``sources``.

They return plain values (messages, Markdown, rows) that ``layout.py`` maps
onto Gradio components, so tests drive them without a browser. Nothing here
raises into the UI: every failure becomes a message the user can read.

    chat = ChatController(services)
    for view in chat.respond(None, "What is in the report?", Settings()):
        print(view.messages[-1]["content"])
    SettingsController(services).model_status()     # the header: the model and what it is good for
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from localrag.app.history import ChatInfo, Turn, make_title
from localrag.app.services import Services
from localrag.app.serving import QueueFull, Ticket, ordinal
from localrag.models import (
    BUNDLED,
    GOOD_FOR,
    IN_A_LINE,
    ModelError,
    ModelInfo,
    inspect_gguf,
    list_models,
    resolve,
)
from localrag.modes import option_fields
from localrag.results import AnswerProgress, AnswerResult
from localrag.ui.render import (
    PENDING,
    accepted_per_step,
    chat_messages,
    llm_history,
    mode_label,
)
from localrag.ui.settings import DRAFT_AUTO, NO_DRAFT, Settings

STREAM_EVERY_S = 0.05  # at most ~20 UI updates a second while streaming
WAIT_POLL_S = 0.5  # how often a waiting answer refreshes its place in line
WARMING_UP = ("waiting: Speedup's one-time timing of this machine's models, running since the app started, makes "
              "way for your answer…")


@dataclass
class ChatView:
    """Everything the chat area shows after one update."""

    messages: list[dict]
    chat_id: int | None
    steps: list[int] = field(default_factory=list)
    busy: bool = False
    note: str = ""
    mode: str = ""  # a reopened chat: the mode of its last answer ('' to leave the picker as it is)
    k: int = 0  # ... and the chunks it searched (0: leave as it is)


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
        """A chat from the history, with the mode its last answer used (by its id: an older chat
        stored an alias) and the k it searched with, so asking again goes on as it went."""
        turns = self.s.history.turns(chat_id)
        steps = accepted_per_step(turns[-1].stats) if turns else []
        mode, k = "", 0
        if turns:
            try:
                mode = self.s.mode(turns[-1].mode).id
            except ValueError:  # a mode this version no longer has
                mode = ""
            stats = turns[-1].stats
            k = stats.search.k if stats is not None and stats.search.k else 0
        return ChatView(chat_messages(turns), chat_id, steps, mode=mode, k=k)

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
            msgs = chat_messages([turn], first=len(previous))  # its place in the chat: its panels' ids, its links
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
            try:
                while not self.s.queue.wait_turn(ticket, timeout=WAIT_POLL_S):
                    if ticket.cancelled:
                        turn.notes.append("Stopped before it started.")
                        break
                    if self.s.warming_up:  # the one-time timing at start: this answer comes right after it
                        yield view(status=f"⏳ {WARMING_UP}")
                    else:
                        yield view(status=f"⏳ waiting: {ordinal(self.s.queue.position(ticket))} in line")
                else:
                    yield from self._answer(turn, previous, settings, ticket, view)
            except Exception as exc:  # any failure becomes a message, never a traceback in the page
                turn.error = f"{type(exc).__name__}: {exc}"
            turn.answer = turn.answer.strip()
            self.s.history.add_turn(chat_id, turn)  # saved before the turn ends: closing the app waits for it
        finally:
            self.s.queue.release(ticket)
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
        if mode in self.s.modes:
            head += f"\n\n_{self.s.modes[mode].summary}_"
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

    def model_status(self) -> str:
        """The header: the model line, one plain line of what the model is good for, then the
        index's health warning, if any. No figures and no path: those are the picker's details."""
        line, sep, rest = self.s.model_status().partition("  \n")
        about = good_for_line(self.s.model_config.model) if self.s.engine is not None and not self.s.answerer.remote \
            else ""
        return line + (f"  \n{about}" if about else "") + sep + rest

    def model_details(self, model: str = "") -> str:
        """The model picker's details: the file, its size, architecture, context and path, and what
        it is good for with the measured figures."""
        return describe_model(model or self.s.model_config.model)

    def model_choices(self, usable: Sequence[str]) -> list[str]:
        """The model picker's choices: the registry's usable models, and the loaded one when it was
        given by path (else the picker showed nothing)."""
        current = self.s.model_config.model
        return [*usable, current] if current and current not in usable else list(usable)


def good_for_line(model: str) -> str:
    """What a model is good for, in one plain line (the registry's), or where to read about one of
    the person's own."""
    if not model:
        return ""
    return f"_{IN_A_LINE.get(model, 'A model of your own: its file and size are under ⚙️ Mode & model.')}_"


def describe_model(model: str) -> str:
    """'📦 `file.gguf` · 1.1 GB · qwen2 · 32,768-token context · /path/to/file.gguf' for a registry name
    or a GGUF path (read from its header; a registry model is never assembled here), 'Hugging Face
    folder /path' for a folder; '' when there is nothing to say."""
    info: ModelInfo | None = None
    if not model:
        return ""
    try:
        if model in BUNDLED:
            info = next((m for m in list_models() if isinstance(m, ModelInfo) and m.name == model), None)
        else:
            path = Path(model).expanduser()
            if path.is_dir():
                return f"📦 Hugging Face folder `{path.absolute()}`"
            if path.is_file():
                info = inspect_gguf(path.absolute())  # the path as given (a symlink stays itself)
    except (ModelError, OSError, ValueError):
        return ""
    if info is None:
        return ""
    parts = [f"`{Path(info.path).name}`", size_text(info.size_bytes), info.architecture]
    if info.context_length:
        parts.append(f"{info.context_length:,}-token context")
    parts.append(f"`{Path(info.path)}`")
    good = f"  \nGood for: {GOOD_FOR[model]}" if model in GOOD_FOR else ""
    return "📦 " + " · ".join(parts) + good


def size_text(n: int) -> str:
    """Bytes for a person: 1.1 GB, 491 MB, 12 KB."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}" if n < 10 * scale else f"{n / scale:.0f} {unit}"
    return f"{n} B"
