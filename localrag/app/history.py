"""Chat history: conversations and their turns in one SQLite file, surviving restarts.

A *turn* is one question and its answer plus the evidence shown with it
(the sentence-level evidence, citations, what else was searched, a refusal,
stats, the mode's extras such as Grounded's drafts), stored as JSON so the UI can re-render a past chat
exactly as it looked. UI-free; the Gradio app and tests use it alike.

    store = ChatStore(data_dir / "history.sqlite")
    chat = store.new_chat("What does the contract say?")
    store.add_turn(chat, Turn(question="...", answer="...", mode="plain"))
    store.list_chats()          # newest first: [ChatInfo(id, title, updated, n_turns)]
    store.turns(chat)           # [Turn, ...] in order
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from localrag.results import AnswerEvidence, AnswerResult, AnswerStats, Citation, ModeExtras

SCHEMA = """
CREATE TABLE IF NOT EXISTS chats (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    title TEXT NOT NULL,
    created REAL NOT NULL,
    updated REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS turns (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    chat_id INTEGER NOT NULL REFERENCES chats(id) ON DELETE CASCADE,
    question TEXT NOT NULL,
    answer TEXT NOT NULL,
    mode TEXT NOT NULL,
    payload TEXT NOT NULL,      -- JSON: evidence, citations, also searched, refusal, stats, extras, error, collection
    created REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS turns_by_chat ON turns(chat_id, id);
"""

TITLE_CHARS = 60


@dataclass
class Turn:
    """One exchange and what was shown with it (stored as JSON, read back into the same types)."""

    question: str
    answer: str = ""
    mode: str = "plain"
    citations: list[Citation] = field(default_factory=list)
    stats: AnswerStats | None = None
    extras: ModeExtras | None = None  # what the mode added (Grounded: its drafts)
    error: str = ""
    notes: list[str] = field(default_factory=list)  # not errors: "stopped", "empty collection", ...
    collection: str = ""
    searched: str = ""  # what was searched, in words
    evidence: AnswerEvidence | None = None  # the answer's sentence-level evidence (offsets into ``answer``)
    also_searched: list[Citation] = field(default_factory=list)  # retrieved chunks that support nothing
    refusal: str = ""  # shown instead of the answer when the documents do not support it (the answer kept)
    supported: bool | None = None  # None: not checked (turns stored before the check existed)
    id: int | None = None

    def take(self, result: AnswerResult) -> None:
        """Keep what a finished answer shows."""
        self.answer = result.text or self.answer.strip()
        self.citations, self.also_searched = list(result.citations), list(result.also_searched)
        self.evidence, self.refusal, self.supported = result.evidence, result.refusal, result.supported
        self.extras, self.stats, self.searched = result.extras, result.stats, result.searched
        self.notes += [n for n in result.notes if n not in self.notes]

    def payload(self) -> str:
        return json.dumps({"citations": [c.to_dict() for c in self.citations],
                           "also_searched": [c.to_dict() for c in self.also_searched],
                           "evidence": self.evidence.to_dict() if self.evidence is not None else None,
                           "refusal": self.refusal, "supported": self.supported,
                           "stats": self.stats.to_dict() if self.stats is not None else None,
                           "extras": self.extras.to_dict() if self.extras is not None else None,
                           "error": self.error, "notes": self.notes,
                           "collection": self.collection, "searched": self.searched}, ensure_ascii=False)

    @classmethod
    def from_row(cls, tid: int, question: str, answer: str, mode: str, payload: str) -> Turn:
        """A stored turn; a damaged payload loses its extras, never the question and answer."""
        try:
            extra = json.loads(payload)
        except json.JSONDecodeError:
            extra = {}
        stats, evidence = extra.get("stats"), extra.get("evidence")
        return cls(question=question, answer=answer, mode=mode, id=tid,
                   citations=[Citation.from_dict(c) for c in extra.get("citations") or []],
                   also_searched=[Citation.from_dict(c) for c in extra.get("also_searched") or []],
                   evidence=AnswerEvidence.from_dict(evidence) if evidence else None,
                   refusal=extra.get("refusal") or "", supported=extra.get("supported"),
                   stats=AnswerStats.from_dict(stats) if stats else None,
                   extras=ModeExtras.stored(extra),
                   error=extra.get("error") or "", notes=extra.get("notes") or [],
                   collection=extra.get("collection") or "", searched=extra.get("searched") or "")


@dataclass(frozen=True)
class ChatInfo:
    id: int
    title: str
    updated: float
    n_turns: int
    mode: str = ""  # the mode of the chat's latest turn ("" before its first answer)


def make_title(question: str) -> str:
    """First line of the first question, shortened for the sidebar."""
    line = " ".join(question.strip().split()) or "New chat"
    return line if len(line) <= TITLE_CHARS else line[: TITLE_CHARS - 1] + "…"


class ChatStore:
    """Thread-safe (one lock) SQLite store of chats and turns."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(self.path), check_same_thread=False, timeout=30, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA foreign_keys=ON")
        self._db.executescript(SCHEMA)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def new_chat(self, title: str) -> int:
        now = time.time()
        with self._lock:
            cur = self._db.execute("INSERT INTO chats(title, created, updated) VALUES (?, ?, ?)",
                                   (make_title(title), now, now))
            return int(cur.lastrowid)

    def add_turn(self, chat_id: int, turn: Turn) -> int:
        now = time.time()
        with self._lock:
            cur = self._db.execute(
                "INSERT INTO turns(chat_id, question, answer, mode, payload, created) VALUES (?, ?, ?, ?, ?, ?)",
                (chat_id, turn.question, turn.answer, turn.mode, turn.payload(), now))
            self._db.execute("UPDATE chats SET updated = ? WHERE id = ?", (now, chat_id))
            turn.id = int(cur.lastrowid)
            return turn.id

    def pop_last_turn(self, chat_id: int) -> Turn | None:
        """Remove and return the chat's last turn (regenerate)."""
        turns = self.turns(chat_id)
        if not turns:
            return None
        last = turns[-1]
        with self._lock:
            self._db.execute("DELETE FROM turns WHERE id = ?", (last.id,))
        return last

    def turns(self, chat_id: int | None) -> list[Turn]:
        if chat_id is None:
            return []
        with self._lock:
            rows = self._db.execute(
                "SELECT id, question, answer, mode, payload FROM turns WHERE chat_id = ? ORDER BY id",
                (chat_id,)).fetchall()
        return [Turn.from_row(*row) for row in rows]

    def list_chats(self) -> list[ChatInfo]:
        with self._lock:
            rows = self._db.execute(
                "SELECT c.id, c.title, c.updated, COUNT(t.id), "
                "(SELECT mode FROM turns WHERE chat_id = c.id ORDER BY id DESC LIMIT 1) "
                "FROM chats c LEFT JOIN turns t ON t.chat_id = c.id "
                "GROUP BY c.id ORDER BY c.updated DESC, c.id DESC").fetchall()
        return [ChatInfo(int(i), t, float(u), int(n), m or "") for i, t, u, n, m in rows]

    def exists(self, chat_id: int) -> bool:
        with self._lock:
            return self._db.execute("SELECT 1 FROM chats WHERE id = ?", (chat_id,)).fetchone() is not None

    def delete_chat(self, chat_id: int) -> None:
        with self._lock:
            self._db.execute("DELETE FROM chats WHERE id = ?", (chat_id,))
