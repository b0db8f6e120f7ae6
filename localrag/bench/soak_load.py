"""The soak's moving parts: one request over the OpenAI API (streamed SSE, read with httpx) or over
MCP (the ``mcp`` package's client session on the server's streamable-HTTP transport), the clients
that send them until the deadline, the sampler of the server's memory and descriptors, and the
ingest that changes a watched folder alongside.

Every request is a ``Probe`` (what to ask) and ends as an ``Outcome`` (what came back, when).
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Callable
from contextlib import AsyncExitStack, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import psutil

if TYPE_CHECKING:
    from mcp.client.session import ClientSession

REQUEST_TIMEOUT_S = 900.0  # one request, waiting in line included (8 clients x the longest answer)
MCP_SESSION_CALLS = 5  # an MCP client opens a new session after this many calls (sessions come and go)


@dataclass(frozen=True)
class Probe:
    """One distinct request. ``compared``: its greedy answer is checked against the same request
    answered alone (False on the collection the ingest changes: its answer may change with it)."""

    channel: str  # "openai" (streamed chat completion) | "mcp-ask" | "mcp-search"
    question: str
    collection: str | None
    mode: str = "plain"
    max_tokens: int = 48
    compared: bool = True

    @property
    def key(self) -> str:
        return f"{self.channel}|{self.collection or '-'}|{self.mode}|{self.question}"


@dataclass(frozen=True)
class Outcome:
    probe: Probe
    client: int
    started: float  # monotonic seconds
    ttft_s: float | None  # to the first text piece (a streamed answer only)
    end_s: float | None  # to the last byte (None: disconnected on purpose, or failed)
    text: str
    error: str = ""  # '' when it went as it should
    disconnected: bool = False  # the client closed the stream after its first piece, on purpose


@dataclass
class Sample:
    t_s: float  # seconds since the load began (negative before it)
    phase: str  # "lone-before" | "load" | "lone-after" | "end"
    rss_mib: float
    fds: int


# ------------------------------------------------------------------ one request
async def ask_openai(http: httpx.AsyncClient, model: str, probe: Probe, client: int, disconnect: bool) -> Outcome:
    """Streams the answer; with ``disconnect``, closes the connection after the first text piece."""
    body = {"model": model, "messages": [{"role": "user", "content": probe.question}], "max_tokens": probe.max_tokens,
            "temperature": 0, "stream": True, "mode": probe.mode}
    if probe.collection:
        body["collection"] = probe.collection
    t0 = time.monotonic()
    pieces: list[str] = []
    first = None
    try:
        async with http.stream("POST", "/v1/chat/completions", json=body) as r:
            if r.status_code != 200:
                detail = (await r.aread()).decode(errors="replace")[:300]
                return Outcome(probe, client, t0, None, None, "", f"HTTP {r.status_code}: {detail}")
            async for line in r.aiter_lines():
                if not line.startswith("data: "):
                    continue  # blank separators and ': progress' keep-alive comments
                if line == "data: [DONE]":
                    return Outcome(probe, client, t0, first, time.monotonic() - t0, "".join(pieces),
                                   "" if first is not None else "the stream ended without text")
                event = json.loads(line[6:])
                if "error" in event:
                    return Outcome(probe, client, t0, first, None, "".join(pieces), f"error event: {event['error']}")
                for choice in event.get("choices", []):
                    if choice["delta"].get("content"):
                        first = first if first is not None else time.monotonic() - t0
                        pieces.append(choice["delta"]["content"])
                if disconnect and first is not None:
                    return Outcome(probe, client, t0, first, None, "".join(pieces), disconnected=True)
        return Outcome(probe, client, t0, first, None, "".join(pieces), "the stream closed before [DONE]")
    except (httpx.HTTPError, json.JSONDecodeError, KeyError) as exc:
        return Outcome(probe, client, t0, first, None, "".join(pieces), f"{type(exc).__name__}: {exc}")


async def ask_mcp(session: ClientSession, probe: Probe, client: int) -> Outcome:
    t0 = time.monotonic()
    try:
        if probe.channel == "mcp-search":
            result = await session.call_tool("search_documents", {"query": probe.question,
                                                                  "collection": probe.collection, "k": 3})
        else:
            result = await session.call_tool("ask_documents", {"question": probe.question,
                                                               "collection": probe.collection, "mode": probe.mode})
    except Exception as exc:  # the transport's and the session's errors: reported, not raised
        return Outcome(probe, client, t0, None, None, "", f"{type(exc).__name__}: {exc}")
    took = time.monotonic() - t0
    text = result.content[0].text if result.content else ""
    if result.is_error:
        return Outcome(probe, client, t0, None, None, "", f"tool error: {text[:300]}")
    data = json.loads(text)
    if probe.channel == "mcp-search":
        return Outcome(probe, client, t0, None, took, "\n".join(f"{h['source']}: {h['text']}" for h in data["hits"]),
                       "" if data["hits"] else "no hits")
    return Outcome(probe, client, t0, None, took, data["answer"], "" if data["answer"].strip() else "empty answer")


class McpClient:
    """An MCP client that keeps a session for ``MCP_SESSION_CALLS`` calls, then opens a new one."""

    def __init__(self, url: str) -> None:
        self.url, self.calls, self.stack, self.session = url, 0, None, None

    async def call(self, probe: Probe, client: int) -> Outcome:
        # imported here, as serve does: not on the start of every other ``python -m localrag`` command
        import httpx2
        from mcp.client.session import ClientSession
        from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client

        if self.session is None or self.calls >= MCP_SESSION_CALLS:
            await self.close()
            self.stack = AsyncExitStack()
            # the client's default read timeout (300 s between bytes) is shorter than a turn in a
            # line of 8 clients on 2 cores: an ask_documents call waiting its turn timed out there
            http = await self.stack.enter_async_context(
                create_mcp_http_client(timeout=httpx2.Timeout(30.0, read=REQUEST_TIMEOUT_S)))
            read, write, *_ = await self.stack.enter_async_context(streamable_http_client(self.url, http_client=http))
            self.session = await self.stack.enter_async_context(ClientSession(read, write))
            await self.session.initialize()
            self.calls = 0
        self.calls += 1
        return await ask_mcp(self.session, probe, client)

    async def close(self) -> None:
        if self.stack is not None:
            await self.stack.aclose()
        self.stack = self.session = None


async def ask_alone(base: str, model: str, probe: Probe) -> Outcome:
    """``probe`` answered with nothing else in flight, on a fresh connection (or session)."""
    if probe.channel == "openai":
        async with httpx.AsyncClient(base_url=base, timeout=REQUEST_TIMEOUT_S) as http:
            return await ask_openai(http, model, probe, -1, disconnect=False)
    mcp = McpClient(base + "/mcp")
    try:
        return await mcp.call(probe, -1)
    finally:
        await mcp.close()


# ------------------------------------------------------------------ the load
@dataclass
class Load:
    """What the clients share: where to send, what to ask, when to stop, what came back."""

    base: str
    model: str
    openai_probes: list[Probe]
    mcp_probes: list[Probe]
    deadline: float  # monotonic: no request starts after it
    max_requests: int
    disconnect_rate: float
    seed: int
    outcomes: list[Outcome] = field(default_factory=list)
    started: int = 0
    progress: Callable[[str], None] = print
    reported: float = 0.0  # monotonic: the last progress line

    def report(self, every_s: float = 60) -> None:
        if time.monotonic() - self.reported >= every_s:
            self.reported = time.monotonic()
            failed = sum(bool(o.error) for o in self.outcomes)
            left = max(0.0, self.deadline - time.monotonic()) / 60
            self.progress(f"{len(self.outcomes)} requests done, {failed} failed, {left:.1f} min left")

    def take(self) -> bool:
        """Whether one more request may start (the count and the time bound)."""
        if time.monotonic() >= self.deadline or self.started >= self.max_requests:
            return False
        self.started += 1
        return True


async def openai_client(load: Load, i: int) -> None:
    rng = random.Random(load.seed * 1000 + i)
    async with httpx.AsyncClient(base_url=load.base, timeout=REQUEST_TIMEOUT_S) as http:
        while load.openai_probes and load.take():
            probe = rng.choice(load.openai_probes)
            disconnect = rng.random() < load.disconnect_rate
            load.outcomes.append(await ask_openai(http, load.model, probe, i, disconnect))
            load.report()


async def mcp_client(load: Load, i: int) -> None:
    rng = random.Random(load.seed * 1000 + i)
    mcp = McpClient(load.base + "/mcp")
    try:
        while load.mcp_probes and load.take():
            probe = rng.choice(load.mcp_probes)
            try:
                outcome = await mcp.call(probe, i)
            except Exception as exc:  # a session that would not open
                outcome = Outcome(probe, i, time.monotonic(), None, None, "", f"{type(exc).__name__}: {exc}")
                await mcp.close()
            load.outcomes.append(outcome)
            load.report()
    finally:
        await mcp.close()


# ------------------------------------------------------------------ alongside: sampler and ingest
def sample(proc: psutil.Process, t_s: float, phase: str) -> Sample:
    """The server's resident memory and open descriptors (its child processes' too, if any)."""
    procs = [proc, *proc.children(recursive=True)]
    rss = fds = 0
    for p in procs:
        try:
            rss += p.memory_info().rss
            fds += p.num_fds()
        except psutil.NoSuchProcess:
            pass
    return Sample(t_s, phase, rss / 2**20, fds)


async def sampler(proc: psutil.Process, every_s: float, t0: float, phase: Callable[[], str],
                  out: list[Sample], stop: asyncio.Event) -> None:
    while not stop.is_set():
        out.append(sample(proc, time.monotonic() - t0, phase()))
        with suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), every_s)


@dataclass
class Churn:
    """The ingest alongside: every ``every_s``, a file of the watched folder is written (added the
    first rounds, then rewritten in turn); each write carries a word of its own (``last_word``)."""

    folder: Path
    every_s: float
    files: int = 3
    writes: int = 0
    last_word: str = ""

    def write(self) -> None:
        self.last_word = f"quorvex{self.writes:05d}"
        path = self.folder / f"log-{self.writes % self.files}.md"
        path.write_text(f"# Ferry log entry {self.writes}\n\nThe tide marker read {self.last_word} at dawn. "
                        f"Entry {self.writes} notes that the harbour crane was inspected and found sound.\n")
        self.writes += 1

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), self.every_s)
            except TimeoutError:
                self.write()
