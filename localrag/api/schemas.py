"""The API's requests: OpenAI's chat-completion and embedding bodies plus localrag's extensions,
validated into frozen values. Anything wrong becomes ``ApiError(400)`` naming the parameter.

    req = parse_chat(json_body)       # ChatRequest(model=..., messages=(...), gen=GenerationConfig(...))
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from localrag.api.errors import ApiError
from localrag.config import GenerationConfig

MAX_BODY_BYTES = 1 << 20  # 1 MiB per request body
MAX_TOKENS_CAP = 2048  # a larger max_tokens is lowered to this (and to what the context leaves)
DEFAULT_MAX_TOKENS = 512
MAX_MESSAGES = 256
MAX_EMBED_INPUTS = 256
MAX_EMBED_CHARS = 20_000  # per input; MiniLM reads 256 word pieces anyway


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore")  # OpenAI parameters we do not use are accepted and ignored


class _TextPart(_Body):
    type: Literal["text"]
    text: str


class _Message(_Body):
    role: Literal["system", "developer", "user", "assistant"]
    content: str | list[_TextPart] | None = None


class _StreamOptions(_Body):
    include_usage: bool = False


class _ChatBody(_Body):
    model: str = Field(min_length=1)
    messages: list[_Message] = Field(min_length=1, max_length=MAX_MESSAGES)
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    seed: int | None = None
    stop: str | list[str] | None = None
    stream: bool = False
    stream_options: _StreamOptions | None = None
    n: int = Field(default=1, ge=1, le=1)
    # localrag's extensions
    collection: str | None = Field(default=None, min_length=1)
    mode: str = "plain"
    k: int = Field(default=5, ge=1, le=20)
    on_unsupported: Literal["warn", "refuse"] | None = None  # None: the mode's default
    options: dict[str, str | int | float | bool] | None = None  # the mode's other options, by name


class _EmbeddingBody(_Body):
    model: str = Field(min_length=1)
    input: str | list[str] = Field(min_length=1)
    encoding_format: Literal["float", "base64"] = "float"


@dataclass(frozen=True)
class ChatRequest:
    """One validated chat-completion request."""

    model: str
    messages: tuple[dict, ...]  # {"role", "content"} with content as text; "developer" read as "system"
    gen: GenerationConfig
    stream: bool
    include_usage: bool
    collection: str | None
    mode: str
    k: int
    on_unsupported: str | None = None  # warn | refuse | None: the mode's default
    options: tuple[tuple[str, object], ...] = ()  # the mode's other options (``options`` in the body)

    @property
    def values(self) -> dict[str, object]:
        """What the mode's options are made from: ``k``, ``on_unsupported`` and ``options``."""
        return {"k": self.k, "on_unsupported": self.on_unsupported, **dict(self.options)}

    @property
    def question(self) -> str:
        """The last user message: what a grounded answer answers."""
        return next(m["content"] for m in reversed(self.messages) if m["role"] == "user")

    @property
    def history(self) -> tuple[dict, ...]:
        """The user and assistant turns before the last user message (a grounded answer's history)."""
        return tuple(m for m in self.before_question if m["role"] in ("user", "assistant"))

    @property
    def before_question(self) -> tuple[dict, ...]:
        """Every message before the last user message, system turns included (chat without a collection)."""
        last = max(i for i, m in enumerate(self.messages) if m["role"] == "user")
        return self.messages[:last]


@dataclass(frozen=True)
class EmbeddingRequest:
    model: str
    inputs: tuple[str, ...]
    encoding_format: str = "float"  # or "base64": little-endian float32 bytes (what the openai client asks for)


def read_json(body: bytes) -> dict:
    if len(body) > MAX_BODY_BYTES:
        raise ApiError(413, f"request body over {MAX_BODY_BYTES} bytes", code="request_too_large")
    try:
        data = json.loads(body or b"null")
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ApiError(400, f"the body is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ApiError(400, "the body must be a JSON object")
    return data


def _validate(model: type[BaseModel], data: dict) -> BaseModel:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        param = ".".join(str(p) for p in err["loc"]) or None
        raise ApiError(400, f"invalid {param or 'request'}: {err['msg']}", param=param) from None


def parse_chat(data: dict) -> ChatRequest:
    body = _validate(_ChatBody, data)
    messages = tuple({"role": "system" if m.role == "developer" else m.role, "content": _text(m.content)}
                     for m in body.messages)
    if not any(m["role"] == "user" for m in messages):
        raise ApiError(400, "messages must contain a user message", param="messages")
    stop = (body.stop,) if isinstance(body.stop, str) else tuple(body.stop or ())
    if len(stop) > 4 or any(not s for s in stop):
        raise ApiError(400, "stop takes at most 4 non-empty strings", param="stop")
    wanted = body.max_completion_tokens or body.max_tokens or DEFAULT_MAX_TOKENS
    gen = GenerationConfig(max_tokens=min(wanted, MAX_TOKENS_CAP), temperature=body.temperature,
                           top_p=body.top_p, seed=body.seed, stop=stop)
    include_usage = body.stream_options.include_usage if body.stream_options else False
    return ChatRequest(model=body.model, messages=messages, gen=gen, stream=body.stream,
                       include_usage=include_usage, collection=body.collection, mode=body.mode, k=body.k,
                       on_unsupported=body.on_unsupported, options=tuple((body.options or {}).items()))


def parse_embeddings(data: dict) -> EmbeddingRequest:
    body = _validate(_EmbeddingBody, data)
    inputs = (body.input,) if isinstance(body.input, str) else tuple(body.input)
    if len(inputs) > MAX_EMBED_INPUTS:
        raise ApiError(400, f"at most {MAX_EMBED_INPUTS} inputs per request", param="input")
    if any(len(t) > MAX_EMBED_CHARS for t in inputs):
        raise ApiError(400, f"an input is over {MAX_EMBED_CHARS} characters", param="input")
    return EmbeddingRequest(model=body.model, inputs=inputs, encoding_format=body.encoding_format)


def _text(content: str | list[_TextPart] | None) -> str:
    if content is None:
        return ""
    return content if isinstance(content, str) else "".join(p.text for p in content)
