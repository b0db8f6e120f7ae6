"""Follow-up questions search with the conversation: the retrieval query of the last question,
rewritten from the earlier turns.

A follow-up ("When was it founded?") says little on its own; the conversation says what "it" is.
The query searched is the last question plus the key terms of the earlier user questions it does
not already contain: the words the BM25 index would keep (its stopwords and a few question words
removed, compared by their Snowball stem, as the index compares them), most recent question first,
in their own spelling (the embedder reads them too). A question with no earlier user turn is
searched unchanged. The UI (the chat's turns), the API (``messages``) and the CLI (``--history``)
all search through ``search_query``; the question the model answers is never changed.

    search_query("When was it founded?", [{"role": "user", "content": "Tell me about Acme Corp."}])
    # -> 'When was it founded? Acme Corp'
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bm25s.stopwords import STOPWORDS_EN

from localrag.rag.retrieve import english_stemmer

WORD = re.compile(r"(?u)\b\w\w+\b")  # the BM25 tokenizer's words: two or more word characters
# the BM25 stopwords, plus the words of asking that name no topic
CHAT_WORDS = frozenset({
    "what", "who", "whom", "whose", "which", "when", "where", "why", "how", "did", "does", "do", "done",
    "was", "were", "has", "have", "had", "can", "could", "would", "should", "may", "might", "shall",
    "me", "my", "you", "your", "we", "our", "us", "he", "she", "him", "her", "his", "its", "them",
    "tell", "about", "please", "know", "explain", "describe", "also", "more", "else", "other", "some",
    "any", "much", "many", "than", "so", "too", "very", "just", "one", "ones", "from", "up", "out",
})
STOPWORDS = frozenset(STOPWORDS_EN) | CHAT_WORDS


@dataclass(frozen=True)
class FollowupConfig:
    """turns: earlier user questions whose key terms are added (the most recent first; 0: search
    the last question alone). max_terms: at most this many terms are added."""

    turns: int = 1
    max_terms: int = 12

    def __post_init__(self) -> None:
        if self.turns < 0 or self.max_terms < 0:
            raise ValueError("turns and max_terms must be >= 0")


class HistoryError(ValueError):
    """A conversation that is not a list of {"role", "content"} turns."""


def key_terms(text: str) -> list[str]:
    """The words of ``text`` the index would search by, in order, once per stem."""
    stem = english_stemmer().stemWord
    out, seen = [], set()
    for word in WORD.findall(text):
        s = stem(word.lower())
        if word.lower() not in STOPWORDS and s not in seen:
            seen.add(s)
            out.append(word)
    return out


def search_query(question: str, history: Sequence[dict], config: FollowupConfig = FollowupConfig()) -> str:
    """The query to search for ``question`` asked after ``history`` (earlier ``{"role", "content"}``
    turns, oldest first): the question, then the key terms of the last ``config.turns`` user
    questions that it does not already contain (by stem). No earlier user turn: the question."""
    earlier = [m["content"] for m in history if m.get("role") == "user" and isinstance(m.get("content"), str)]
    if not earlier or not config.turns or not config.max_terms:
        return question
    stem = english_stemmer().stemWord
    seen = {stem(w.lower()) for w in WORD.findall(question)}
    added: list[str] = []
    for text in reversed(earlier[-config.turns:]):
        for word in key_terms(text):
            s = stem(word.lower())
            if s not in seen:
                seen.add(s)
                added.append(word)
    added = added[:config.max_terms]
    return f"{question} {' '.join(added)}" if added else question


def parse_history(data: object) -> list[dict]:
    """A conversation as turns: a JSON list of objects with a string ``role`` (user, assistant or
    system) and a string ``content``. Anything else raises HistoryError with what is wrong."""
    if not isinstance(data, list):
        raise HistoryError(f'the history must be a JSON list of {{"role", "content"}} turns, not {type(data).__name__}')
    turns = []
    for i, turn in enumerate(data):
        if not isinstance(turn, dict) or not isinstance(turn.get("content"), str) \
                or turn.get("role") not in ("user", "assistant", "system"):
            raise HistoryError(f'turn {i} of the history is not {{"role": "user"|"assistant"|"system", '
                               f'"content": "..."}}')
        turns.append({"role": turn["role"], "content": turn["content"]})
    return turns


def read_history(path: str | Path) -> list[dict]:
    """The turns of a ``--history FILE.json``; HistoryError (one line) when unreadable or malformed."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise HistoryError(f"cannot read the history file {path}: {exc.strerror or exc}") from exc
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise HistoryError(f"the history file {path} is not JSON: {exc}") from exc
    return parse_history(data)
