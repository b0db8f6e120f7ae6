"""What an answering mode is: a class with an id, a label, ``available()`` and ``stream()``.

    class MyMode(AnswerMode):
        id = "mine"
        label = "Mine"
        def stream(self, answerer, request):
            ...                       # yield text pieces (AnswerProgress first, if slow), then one AnswerResult

Register it with one line in ``localrag/modes/__init__.py``; the UI, the CLI, the API and the
benchmarks read the modes from there.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import ClassVar, Protocol

from localrag.answer import Answerer
from localrag.config import GenerationConfig
from localrag.engine import Engine
from localrag.results import ON_UNSUPPORTED, AnswerProgress, AnswerResult


class CancelFlag(Protocol):
    """Set when the asker stopped (a ``threading.Event``; the queue's ``Ticket.cancel``)."""

    def is_set(self) -> bool: ...


@dataclass(frozen=True)
class AnswerRequest:
    """One question to answer. history: earlier turns as ``{"role", "content"}`` dicts.
    cancel: when set, the mode stops writing and still ends with its AnswerResult (the text so
    far, the sources and the stats). on_unsupported: what an answer the documents do not support
    gets, "warn" or "refuse" (None: the mode's default, ``AnswerMode.on_unsupported``)."""

    question: str
    history: tuple[dict, ...] = ()
    gen: GenerationConfig = field(default_factory=GenerationConfig)
    k: int = 5  # chunks in the prompt (Plain, Speedup)
    collection: str | None = None  # None: the answerer's default index
    cancel: CancelFlag | None = field(default=None, compare=False)
    on_unsupported: str | None = None

    def __post_init__(self) -> None:
        if self.on_unsupported is not None and self.on_unsupported not in ON_UNSUPPORTED:
            raise ValueError(f"on_unsupported must be one of {', '.join(ON_UNSUPPORTED)}, "
                             f"not {self.on_unsupported!r}")

    @property
    def cancelled(self) -> bool:
        return self.cancel is not None and self.cancel.is_set()


class AnswerMode(ABC):
    """One way of answering a question over the documents."""

    id: ClassVar[str]  # what the CLI, the API and stored chats call it
    label: ClassVar[str]  # what the UI shows
    aliases: ClassVar[tuple[str, ...]] = ()  # other accepted spellings of ``id``
    summary: ClassVar[str] = ""  # one line for help texts
    on_unsupported: ClassVar[str] = "warn"  # what an unsupported answer gets unless the request says

    def policy(self, request: AnswerRequest) -> str:
        """warn or refuse: the request's choice, else this mode's default."""
        return request.on_unsupported or self.on_unsupported

    def available(self, engine: Engine | None) -> tuple[bool, str]:
        """(usable, why not) with this loaded target model."""
        return (True, "") if engine is not None else (False, "no model is loaded")

    @abstractmethod
    def stream(self, answerer: Answerer, request: AnswerRequest) -> Iterator[str | AnswerProgress | AnswerResult]:
        """Text pieces as they are written, then exactly one AnswerResult. Before its text, a slow
        mode may yield ``AnswerProgress`` (what it is doing); a consumer that only wants the text
        keeps the ``str`` items and skips the rest."""

    def answer(self, answerer: Answerer, request: AnswerRequest) -> AnswerResult:
        """Non-streaming: the final AnswerResult."""
        result = None
        for item in self.stream(answerer, request):
            if isinstance(item, AnswerResult):
                result = item
        if result is None:
            raise RuntimeError(f"mode {self.id} ended without a result")
        return result
