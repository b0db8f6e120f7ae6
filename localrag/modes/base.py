"""What an answering mode is: an id, a label, its options, ``available()`` and ``stream()``.

    @dataclass(frozen=True)
    class MineOptions(ModeOptions):
        depth: int = option(3, "how deep to look", int)

    class MineMode(AnswerMode):
        id, label, summary = "mine", "Mine", "one line for help texts"
        options_type = MineOptions
        def stream(self, answerer, request):
            opts = self.options_of(request)    # MineOptions, validated
            ...                                # yield text pieces (AnswerProgress first, if slow), then one AnswerResult

Register it with one line in ``localrag/modes/__init__.py``: the UI's mode list, the command
line's ``--mode`` (and one flag per option field) and the API's ``mode`` (and ``options``) read
the registry. A mode builds what it needs from the shared ``Answerer`` (the target, the indexes,
the models loaded beside it, the search, the prompt, the check) and keeps what outlives one
answer through ``Answerer.runtime``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping
from dataclasses import MISSING, Field, dataclass, field, fields
from typing import ClassVar, Protocol, TypeVar

from localrag.answer import Answerer
from localrag.config import GenerationConfig
from localrag.results import ON_UNSUPPORTED, AnswerProgress, AnswerResult

OptionsT = TypeVar("OptionsT", bound="ModeOptions")


class CancelFlag(Protocol):
    """Set when the asker stopped (a ``threading.Event``; the queue's ``Ticket.cancel``)."""

    def is_set(self) -> bool: ...


def option(default, help: str, convert: Callable[[str], object] = str, choices: tuple = ()):  # noqa: A002
    """A mode option field: its default, one line of help, how a string becomes its value (the
    command line and the UI hand strings), and the values it may take (empty: any)."""
    return field(default=default, metadata={"help": help, "convert": convert, "choices": choices})


@dataclass(frozen=True)
class ModeOptions:
    """A mode's settings for one request, checked when made. Subclasses add ``option`` fields and
    extend ``validate``; ``from_values`` builds one from the loose values a front end collected
    (names another mode uses are ignored; strings are converted; a bad value is a ValueError
    naming the option)."""

    on_unsupported: str | None = option(None, "an answer the documents do not support: warn (show it, "
                                        "marked) or refuse (say so instead); default: the mode's",
                                        choices=ON_UNSUPPORTED)

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        for f in option_fields(type(self)):
            value, allowed = getattr(self, f.name), f.metadata["choices"]
            if allowed and value is not None and value not in allowed:
                raise ValueError(f"{f.name} must be one of {', '.join(map(str, allowed))}, not {value!r}")

    @classmethod
    def from_values(cls: type[OptionsT], values: Mapping[str, object]) -> OptionsT:
        given = {}
        for f in option_fields(cls):
            value = values.get(f.name)
            if value is None or value == "":
                continue
            if isinstance(value, str) and f.metadata["convert"] is not str:
                try:
                    value = f.metadata["convert"](value)
                except ValueError:
                    raise ValueError(f"{f.name}: {value!r} is not a valid value") from None
            given[f.name] = value
        return cls(**given)


def option_fields(cls: type[ModeOptions]) -> list[Field]:
    return [f for f in fields(cls) if "help" in f.metadata]


def default_of(f: Field):
    return f.default if f.default is not MISSING else f.default_factory()  # type: ignore[misc]


@dataclass(frozen=True)
class AnswerRequest:
    """One question to answer.

    history: earlier turns as ``{"role", "content"}`` dicts. documents: False answers from the
    conversation alone, laid out exactly as given (the API's chat without a collection); True
    searches ``collection`` (None: the default one). cancel: when set, the mode stops writing and
    still ends with its AnswerResult (the text so far, the sources and the stats). options: the
    mode's own settings (None: its defaults)."""

    question: str
    history: tuple[dict, ...] = ()
    gen: GenerationConfig = field(default_factory=GenerationConfig)
    collection: str | None = None
    documents: bool = True
    cancel: CancelFlag | None = field(default=None, compare=False)
    options: ModeOptions | None = None

    @property
    def cancelled(self) -> bool:
        return self.cancel is not None and self.cancel.is_set()


class WarmUpStopped(RuntimeError):
    """``AnswerMode.warm_up`` gave way to an answer: done in part or not at all, to be tried again."""


class AnswerMode(ABC):
    """One way of answering a question over the documents."""

    id: ClassVar[str]  # what the CLI, the API, the UI and stored chats call it
    label: ClassVar[str]  # what the UI shows
    aliases: ClassVar[tuple[str, ...]] = ()  # old spellings, read from stored chats and old clients only
    summary: ClassVar[str] = ""  # one line for help texts
    on_unsupported: ClassVar[str] = "warn"  # what an unsupported answer gets unless the request says
    options_type: ClassVar[type[ModeOptions]] = ModeOptions

    def options(self, values: Mapping[str, object] | None = None) -> ModeOptions:
        """This mode's options from loose values (the UI's controls, CLI flags, an API body)."""
        return self.options_type.from_values(values or {})

    def options_of(self, request: AnswerRequest) -> ModeOptions:
        """The request's options as this mode's type (a request made for another mode keeps the
        values both modes share)."""
        opts = request.options
        if isinstance(opts, self.options_type):
            return opts
        return self.options({f.name: getattr(opts, f.name) for f in fields(opts)} if opts is not None else {})

    def policy(self, request: AnswerRequest) -> str:
        """warn or refuse: the request's choice, else this mode's default."""
        return self.options_of(request).on_unsupported or self.on_unsupported

    def available(self, answerer: Answerer | None) -> tuple[bool, str]:
        """(usable, why not) with this loaded target model."""
        return (True, "") if answerer is not None else (False, "no model is loaded")

    def warm_up(self, answerer: Answerer, stop: Callable[[], bool] = lambda: False) -> str:
        """One-time work this mode's first answer would otherwise start with, done ahead (a server
        calls it on its generation thread, in its turn, while nobody is asking). Returns what it
        did, in words ('' when there was nothing to do); WarmUpStopped when ``stop`` said someone
        is waiting (the server tries again once idle)."""
        return ""

    def refuses(self, request: AnswerRequest) -> str:
        """Why this mode cannot take ``request`` ('' when it can): checked before its turn."""
        return ""

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
