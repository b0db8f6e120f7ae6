"""A client of an OpenAI-compatible serving engine (llama-server, vLLM, Ollama, ...).

    engine = EndpointEngine(EndpointConfig("http://127.0.0.1:8080/v1", model="smollm2"))
    gen = engine.chat([{"role": "user", "content": "Hi!"}], GenerationConfig(max_tokens=32))
    for piece in gen:                        # streamed: /v1/chat/completions with server-sent events
        print(piece, end="")
    gen.text, gen.finish_reason, gen.ttft_s, gen.stats.decode_tps, gen.stats.generated_tokens
    gens = engine.chat_many([msgs_a, msgs_b], GenerationConfig())   # at once: a batching server runs them together
    engine.models()                          # the ids /v1/models lists
    engine.choice_logprobs(msgs, ("Yes", "No"))   # a verifier's yes/no score; None: the server gives no logprobs

A generation is shaped like ``localrag.generation.Generation``: iterate it once for the text pieces
(or call ``run()``), then read ``.text`` and ``.stats`` (a ``GenerationStats``: prompt and completion
tokens as the server counted them, ``prefill_seconds`` = time to the first piece, ``decode_seconds``
= first piece to last, so ``decode_tps`` is the streamed rate). Decoding settings are the
``GenerationConfig``'s (max_tokens, temperature, top_p, top_k, seed, stop); its repetition guard
is ours, not the server's, and does not apply here.

Every failure is one :class:`EndpointError` whose ``kind`` says what went wrong (``KINDS``) and
whose message is one line naming the URL and what to do; no httpx exception escapes. The stream is
complete only once the server sent ``[DONE]`` or a finish reason; a connection that ends before
is kind ``"cut"``, never a silently short answer.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

import httpx

from localrag.config import GenerationConfig
from localrag.results import GenerationStats

__all__ = ["KINDS", "EndpointConfig", "EndpointEngine", "EndpointError", "EndpointGeneration", "TokenLogprob"]

Message = Mapping[str, str]

KINDS = {
    "down": "the server cannot be reached (connection refused, no such host)",
    "model": "the server does not serve the model asked for",
    "timeout": "no connection, or no bytes, within the configured time",
    "auth": "the server refused the API key (HTTP 401/403)",
    "client": "the server rejected the request (another 4xx), with its message",
    "server": "the server failed (5xx, an error event, or not OpenAI's format)",
    "cut": "the stream ended before [DONE] or a finish reason",
}
T = TypeVar("T")
MESSAGE_CHARS = 300  # the server's own message, as quoted in an error line


class EndpointError(RuntimeError):
    """A request to the endpoint failed; ``kind`` is one of KINDS, ``status`` the HTTP status if
    one came back. ``str()`` is one line: the URL, what happened, what to do."""

    def __init__(self, kind: str, url: str, message: str, status: int | None = None) -> None:
        assert kind in KINDS, kind
        super().__init__(_one_line(message))
        self.kind, self.url, self.status = kind, url, status


@dataclass(frozen=True)
class EndpointConfig:
    """Where the serving engine is. ``url``: its OpenAI base (``http://host:port/v1``; a URL without
    the ``/v1`` gets it). ``model``: the name sent with each request ('' = the first /v1/models
    lists). ``timeout_s``: the longest wait for the server's next bytes (the first piece included);
    ``connect_timeout_s``: for the connection. ``max_concurrent``: requests run at once (``concurrently``)."""

    url: str
    model: str = ""
    api_key: str | None = None
    timeout_s: float = 120.0
    connect_timeout_s: float = 5.0
    max_concurrent: int = 4

    def __post_init__(self) -> None:
        if not self.url.startswith(("http://", "https://")):
            raise ValueError(f"endpoint URL must start with http:// or https://, got {self.url!r}")
        if self.timeout_s <= 0 or self.connect_timeout_s <= 0 or self.max_concurrent < 1:
            raise ValueError("timeout_s and connect_timeout_s must be > 0 and max_concurrent >= 1")

    @property
    def base(self) -> str:
        url = self.url.rstrip("/")
        return url if url.endswith("/v1") else url + "/v1"


@dataclass(frozen=True)
class TokenLogprob:
    """One generated token's log-probability and the server's top alternatives at that step."""

    token: str
    logprob: float
    top: tuple[tuple[str, float], ...] = ()


class EndpointGeneration:
    """One chat completion; iterate once for its text pieces (see the module docstring).

    After the iteration: ``text``, ``stats``, ``finish_reason`` (the server's: "stop", "length",
    ...; "cancelled" when ``cancel`` stopped it), ``ttft_s`` (time to the first piece; for a
    request that was not streamed, the whole request), ``usage_reported`` (whether the server
    counted the tokens; else ``stats.generated_tokens`` counts the pieces received),
    ``logprobs`` (None unless asked for; [] when asked for and the server returned none) and
    ``server_timings`` (llama-server's own ``timings`` object, when it sends one) and
    ``started_at`` (``time.perf_counter()`` when the request went out: with ``ttft_s`` and
    ``stats.decode_seconds``, when its pieces came).
    """

    def __init__(self, engine: EndpointEngine, body: dict, stream: bool, cancel: threading.Event | None) -> None:
        self.engine = engine
        self.body = body
        self.stream = stream
        self.cancel = cancel
        self.text = ""
        self.stats = GenerationStats()
        self.finish_reason: str | None = None
        self.ttft_s: float | None = None
        self.usage_reported = False
        self.logprobs: list[TokenLogprob] | None = [] if body.get("logprobs") else None
        self.server_timings: dict | None = None
        self.started_at: float | None = None  # time.perf_counter() when the request went out
        self._started = False

    @property
    def logprobs_returned(self) -> bool:
        return bool(self.logprobs)

    def read(self) -> Iterator[tuple[int, int]]:
        """Nothing to read here: the server reads the prompt as part of the request (the local
        ``Generation.read`` reports its progress)."""
        yield from ()

    def run(self) -> EndpointGeneration:
        for _ in self:
            pass
        return self

    def __iter__(self) -> Iterator[str]:
        if self._started:
            raise RuntimeError("an EndpointGeneration runs once; ask the engine again for another answer")
        self._started = True
        url = f"{self.engine.config.base}/chat/completions"
        t0 = self.started_at = time.perf_counter()
        with self.engine._errors(url, cut_after=lambda: self.ttft_s is not None or self.stats.steps > 0):
            if not self.stream:
                resp = self.engine._client.post(url, json=self.body, headers=self.engine._headers)
                self.engine._check(resp, url, self.body.get("model", ""))
                yield from self._whole(self.engine._json(resp, url), url, t0)
                return
            with self.engine._client.stream("POST", url, json=self.body, headers=self.engine._headers) as resp:
                if resp.status_code >= 400:
                    resp.read()
                self.engine._check(resp, url, self.body.get("model", ""))
                if not resp.headers.get("content-type", "").startswith("text/event-stream"):
                    resp.read()  # a server that answers a stream request whole, or no OpenAI server at all
                    yield from self._whole(self.engine._json(resp, url), url, t0)
                    return
                yield from self._streamed(resp, url, t0)

    def _streamed(self, resp: httpx.Response, url: str, t0: float) -> Iterator[str]:
        done, t_last = False, t0
        for data in _sse_data(resp.iter_lines()):
            if data.strip() == "[DONE]":
                done = True
                break
            event = _event_json(data, url)
            for piece in self._take(event, url):
                now = time.perf_counter()
                if self.ttft_s is None:
                    self.ttft_s = now - t0
                t_last = now
                self.text += piece
                self.stats.steps += 1
                yield piece
            if self.cancel is not None and self.cancel.is_set():
                self.finish_reason = "cancelled"
                break
        if not done and self.finish_reason is None:
            raise EndpointError("cut", url, f"{url} ended the stream before the answer was complete "
                                f"({len(self.text)} characters in): the server stopped or crashed; ask again")
        self._finish(t0, t_last)

    def _whole(self, payload: dict, url: str, t0: float) -> Iterator[str]:
        self._take(payload, url, whole=True)
        self.ttft_s = time.perf_counter() - t0
        self.stats.steps = 1 if self.text else 0
        self._finish(t0, t0 + self.ttft_s)
        if self.text:
            yield self.text

    def _take(self, event: dict, url: str, whole: bool = False) -> list[str]:
        """Read one event (or a whole response): its text pieces, finish reason, usage, logprobs."""
        if "error" in event:
            err = event["error"]
            message = err.get("message", "") if isinstance(err, dict) else str(err)
            raise EndpointError("server", url, f"{url} sent an error instead of the answer: {_short(message)}; "
                                "see the server's log")
        pieces = []
        for choice in event.get("choices") or []:
            part = choice.get("message" if whole else "delta") or {}
            content = part.get("content")
            if content:
                if whole:
                    self.text = content
                pieces.append(content)
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]
            self._take_logprobs(choice.get("logprobs"))
        usage = event.get("usage")
        if isinstance(usage, dict) and "completion_tokens" in usage:
            self.usage_reported = True
            self.stats.prompt_tokens = int(usage.get("prompt_tokens") or 0)
            self.stats.generated_tokens = int(usage["completion_tokens"] or 0)
        if isinstance(event.get("timings"), dict):
            self.server_timings = event["timings"]
        return pieces

    def _take_logprobs(self, block) -> None:
        if self.logprobs is None or not isinstance(block, dict):
            return
        for entry in block.get("content") or []:
            top = tuple((t.get("token", ""), float(t.get("logprob", -math.inf))) for t in entry.get("top_logprobs") or [])
            self.logprobs.append(TokenLogprob(entry.get("token", ""), float(entry.get("logprob", -math.inf)), top))

    def _finish(self, t0: float, t_last: float) -> None:
        stats = self.stats
        stats.prefill_seconds = self.ttft_s or 0.0
        stats.decode_seconds = max(0.0, t_last - t0 - stats.prefill_seconds)
        if not self.usage_reported:
            stats.generated_tokens = stats.steps
        # OpenAI's "stop" is both the model's end of text and a stop string: without stop strings
        # asked for it can only be the end of text
        reason = self.finish_reason or ""
        stats.stop_reason = {"stop": "stop" if self.body.get("stop") else "eog"}.get(reason, reason)


class EndpointEngine:
    """A serving engine behind one ``EndpointConfig``; thread-safe (one pooled HTTP client)."""

    def __init__(self, config: EndpointConfig) -> None:
        self.config = config
        timeout = httpx.Timeout(config.timeout_s, connect=config.connect_timeout_s)
        limits = httpx.Limits(max_connections=max(10, config.max_concurrent * 2))
        # trust_env off: a proxy from the environment must not see (or break) a local server's traffic
        self._client = httpx.Client(timeout=timeout, limits=limits, trust_env=False)
        self._headers = {"Authorization": f"Bearer {config.api_key}"} if config.api_key else {}
        self._model: str | None = config.model or None
        self._lock = threading.Lock()

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> EndpointEngine:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------ models
    def models(self) -> list[str]:
        """The model ids the server lists (GET /v1/models)."""
        url = f"{self.config.base}/models"
        with self._errors(url):
            resp = self._client.get(url, headers=self._headers)
            self._check(resp, url, "")
            payload = self._json(resp, url)
        return [m["id"] for m in payload.get("data") or [] if isinstance(m, dict) and "id" in m]

    @property
    def model(self) -> str:
        """The model name requests carry: the configured one, else the first the server lists."""
        with self._lock:
            if self._model is None:
                served = self.models()
                if not served:
                    raise EndpointError("model", self.config.base, f"{self.config.base}/models lists no model: "
                                        "load one in the server, or name it in the endpoint's model setting")
                self._model = served[0]
            return self._model

    @property
    def model_name(self) -> str:
        """The model's name, as an Engine's (the name requests carry)."""
        return self.model

    @property
    def label(self) -> str:
        """What it is, for a person: the model on its server."""
        return f"{self.config.model or 'the first model'} on {self.config.base}"

    def check(self) -> list[str]:
        """The served models, after checking the configured one is among them (kind "model" if not).
        Some servers (llama-server with one model) answer whatever name a request carries: this
        is how to catch a wrong name there."""
        served = self.models()
        if self.config.model and self.config.model not in served:
            raise EndpointError("model", self.config.base, f"{self.config.base} does not serve model "
                                f"{self.config.model!r}; it serves {', '.join(served) or 'none'}: fix the model name")
        return served

    # ------------------------------------------------------------ answers
    def request(self, messages: Sequence[Message], config: GenerationConfig | None = None, *,
                stream: bool = True, top_logprobs: int | None = None, extra: Mapping | None = None) -> dict:
        """The JSON body of a chat completion. ``top_logprobs``: ask for each token's log-probability
        and that many alternatives (0: the token's own only, where the server honours it;
        llama-server returns none for 0). ``extra``: server-specific fields (llama-server's
        ``cache_prompt``, vLLM's ``min_tokens``, ...)."""
        cfg = config or GenerationConfig()
        body: dict = {"model": self.model, "messages": [dict(m) for m in messages], "max_tokens": cfg.max_tokens,
                      "temperature": cfg.temperature, "stream": stream}
        if stream:
            body["stream_options"] = {"include_usage": True}
        if cfg.top_p < 1.0:
            body["top_p"] = cfg.top_p
        if cfg.top_k > 0:
            body["top_k"] = cfg.top_k
        if cfg.seed is not None:
            body["seed"] = cfg.seed
        if cfg.stop:
            body["stop"] = list(cfg.stop)
        if top_logprobs is not None:
            body["logprobs"] = True
            body["top_logprobs"] = top_logprobs
        body.update(extra or {})
        return body

    def chat(self, messages: Sequence[Message], config: GenerationConfig | None = None, *, stream: bool = True,
             top_logprobs: int | None = None, cancel: threading.Event | None = None,
             extra: Mapping | None = None) -> EndpointGeneration:
        """A reply to ``messages``; nothing is sent until it is iterated (or ``run()``), except, with
        no model configured, one /v1/models call the first time. ``cancel`` set stops a streamed
        reply between pieces (the connection is closed, so the server stops)."""
        body = self.request(messages, config, stream=stream, top_logprobs=top_logprobs, extra=extra)
        return EndpointGeneration(self, body, stream, cancel)

    def chat_many(self, conversations: Sequence[Sequence[Message]], config: GenerationConfig | None = None,
                  **kwargs) -> list[EndpointGeneration]:
        """Every conversation's reply, run at once (``max_concurrent`` at a time) so that a batching
        server computes them together; finished, in order. Raises the first EndpointError (in
        order) once all have ended."""
        gens = [self.chat(msgs, config, **kwargs) for msgs in conversations]
        return list(self.concurrently([gen.run for gen in gens]))

    def concurrently(self, calls: Sequence[Callable[[], T]]) -> Iterator[T]:
        """Each call's result, in order, the calls run at once (``max_concurrent`` at a time): the
        one pool every batch of requests to this engine goes through. Each result is yielded when
        its call has ended; a call's exception is raised in its place, once every call has ended."""
        workers = min(len(calls), self.config.max_concurrent) or 1
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="localrag-endpoint") as pool:
            futures = [pool.submit(call) for call in calls]
            for future in futures:
                yield future.result()  # an error leaves the block, which first waits for every call

    def choice_logprobs(self, messages: Sequence[Message], choices: Sequence[str] = ("Yes", "No"),
                        top_logprobs: int = 20) -> dict[str, float | None] | None:
        """The log-probability of each choice as the reply's first token (greedy, one token): the
        alternatives whose text equals the choice up to case and surrounding spaces, summed in
        probability; None for a choice not among the top ones. None when the server returned no
        logprobs at all (it does not support them)."""
        config = GenerationConfig(max_tokens=1, temperature=0.0, repetition=None)
        gen = self.chat(messages, config, stream=False, top_logprobs=top_logprobs).run()
        if not gen.logprobs:
            return None
        first = gen.logprobs[0]
        seen = dict(first.top)
        seen.setdefault(first.token, first.logprob)
        out: dict[str, float | None] = {}
        for choice in choices:
            hits = [lp for tok, lp in seen.items() if tok.strip().casefold() == choice.strip().casefold()]
            out[choice] = math.log(sum(math.exp(lp) for lp in hits)) if hits else None
        return out

    # ------------------------------------------------------------ errors
    def _errors(self, url: str, cut_after=lambda: False):
        return _HttpErrors(self, url, cut_after)

    def _check(self, resp: httpx.Response, url: str, model: str) -> None:
        """Raise the EndpointError of an HTTP error status (the body already read)."""
        status = resp.status_code
        if status < 400:
            return
        said = _server_message(resp)
        low = said.lower()
        if status in (401, 403):
            hint = "check the endpoint's API key" if self.config.api_key else "set the endpoint's API key"
            raise EndpointError("auth", url, f"{url} refused the request (HTTP {status}: {said}): {hint}", status)
        if status in (400, 404) and "model" in low and any(w in low for w in ("not found", "not exist", "unknown",
                                                                              "no such", "invalid model")):
            raise EndpointError("model", url, f"{url} does not serve model {model!r} (HTTP {status}: {said}): "
                                "fix the model name (the server's /v1/models lists them)", status)
        if status == 404:
            raise EndpointError("client", url, f"{url} answered 404 ({said}): is {self.config.base} the "
                                "server's OpenAI base URL (ending in /v1)?", status)
        if status < 500:
            raise EndpointError("client", url, f"{url} rejected the request (HTTP {status}): {said}", status)
        raise EndpointError("server", url, f"{url} failed (HTTP {status}: {said}): see the server's log", status)

    def _json(self, resp: httpx.Response, url: str) -> dict:
        try:
            payload = resp.json()
        except ValueError:
            payload = None
        if not isinstance(payload, dict) or not ("choices" in payload or "data" in payload or "error" in payload):
            raise EndpointError("server", url, f"{url} answered something other than OpenAI's JSON "
                                f"({_short(resp.text)}): is it an OpenAI-compatible server?", resp.status_code)
        return payload


class _HttpErrors:
    """Context manager turning httpx's exceptions into EndpointError. ``cut_after()``: whether the
    answer had begun (a dropped connection is then "cut", else "down")."""

    def __init__(self, engine: EndpointEngine, url: str, cut_after) -> None:
        self.engine, self.url, self.cut_after = engine, url, cut_after

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, exc, tb) -> bool:
        if exc is None or isinstance(exc, EndpointError) or not isinstance(exc, httpx.HTTPError):
            return False
        cfg, url = self.engine.config, self.url
        if isinstance(exc, httpx.ConnectTimeout):
            raise EndpointError("timeout", url, f"no connection to {url} within {cfg.connect_timeout_s:g} s: "
                                "is the host up? raise connect_timeout_s for a slow network") from exc
        if isinstance(exc, httpx.TimeoutException):
            raise EndpointError("timeout", url, f"{url} sent nothing for {cfg.timeout_s:g} s: the server is busy "
                                "or stuck; raise timeout_s or try again") from exc
        if isinstance(exc, httpx.ConnectError):
            why = "connection refused" if "refused" in str(exc).lower() else _short(str(exc)) or type(exc).__name__
            raise EndpointError("down", url, f"cannot reach {url} ({why}): start the server or fix the "
                                "endpoint URL") from exc
        if self.cut_after():
            raise EndpointError("cut", url, f"{url} dropped the connection mid-answer ({_short(str(exc))}): "
                                "the server stopped or crashed; ask again") from exc
        if isinstance(exc, httpx.TransportError):
            raise EndpointError("down", url, f"{url} closed the connection before answering ({_short(str(exc))}): "
                                "is the server running and is it an HTTP server?") from exc
        raise EndpointError("server", url, f"{url}: {_short(str(exc))}") from exc


def _sse_data(lines: Iterator[str]) -> Iterator[str]:
    """The data of each server-sent event (its ``data:`` lines joined), comments and other fields dropped."""
    data: list[str] = []
    for line in lines:
        if not line:
            if data:
                yield "\n".join(data)
                data = []
            continue
        field, _, value = line.partition(":")
        if field == "data":
            data.append(value[1:] if value.startswith(" ") else value)
    if data:
        yield "\n".join(data)


def _event_json(data: str, url: str) -> dict:
    try:
        event = json.loads(data)
    except ValueError:
        event = None
    if not isinstance(event, dict):
        raise EndpointError("server", url, f"{url} sent an event that is not OpenAI's JSON ({_short(data)}): "
                            "is it an OpenAI-compatible server?")
    return event


def _server_message(resp: httpx.Response) -> str:
    """The server's own words: OpenAI's error.message, Ollama's error, FastAPI's detail, else the body."""
    try:
        payload = resp.json()
    except ValueError:
        return _short(resp.text) or resp.reason_phrase
    if isinstance(payload, dict):
        err = payload.get("error", payload.get("detail", payload.get("message")))
        if isinstance(err, dict):
            err = err.get("message", err)
        if err:
            return _short(str(err))
    return _short(json.dumps(payload))


def _short(text: str) -> str:
    text = _one_line(text)
    return text if len(text) <= MESSAGE_CHARS else text[: MESSAGE_CHARS - 1] + "…"


def _one_line(text: str) -> str:
    return " ".join(str(text).split())
