"""A server started with ``--api-key`` (and a queue that lets nobody wait): every API and MCP route
refuses calls without the key (401), it still binds 127.0.0.1 only, and a request that finds the
model busy is refused at once with 429.

Run: HF_HUB_OFFLINE=1 .venv/bin/python -m pytest tests/api/test_api_key.py -q
"""

from __future__ import annotations

import asyncio
import threading
import time

import httpx
import openai
import psutil
import pytest
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from openai import OpenAI

from tests.api.conftest import MODEL, Server

pytestmark = pytest.mark.slow

KEY = "s3cret-key-for-tests"
COLOURS = [{"role": "user", "content": "Name three colours."}]


@pytest.fixture(scope="module")
def keyed(docs_index):
    s = Server(docs_index, "--api-key", KEY, "--max-waiting", "0").start()
    yield s
    s.stop()


ROUTES = [("GET", "/v1/models", None),
          ("POST", "/v1/chat/completions", {"model": MODEL, "messages": COLOURS, "max_tokens": 2}),
          ("POST", "/v1/embeddings", {"model": "all-MiniLM-L6-v2", "input": "x"}),
          ("GET", "/v1/documents", None),
          ("POST", "/v1/documents", None),
          ("GET", "/v1/nowhere", None),
          ("POST", "/mcp", {"jsonrpc": "2.0", "id": 1, "method": "tools/list"})]


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {KEY}"},
                                     {"X-Api-Key": "s3cret"}])
def test_every_route_refuses_calls_without_the_key(keyed, headers):
    with httpx.Client(base_url=keyed.base, timeout=60) as h:
        for method, path, body in ROUTES:
            r = h.request(method, path, json=body, headers=headers)
            assert r.status_code == 401, (path, r.status_code, r.text)
            assert r.json()["error"]["code"] == "invalid_api_key" and r.headers["www-authenticate"] == "Bearer"


def test_the_key_opens_every_route(keyed):
    good = OpenAI(base_url=keyed.url, api_key=KEY, max_retries=0, timeout=600)
    assert MODEL in [m.id for m in good.models.list()]
    assert good.embeddings.create(model="all-MiniLM-L6-v2", input="x").data[0].embedding
    assert good.chat.completions.create(model=MODEL, messages=COLOURS, max_tokens=2).choices[0].message.content
    with httpx.Client(base_url=keyed.base, timeout=60) as h:  # the other spelling of the header
        assert h.get("/v1/models", headers={"X-Api-Key": KEY}).status_code == 200
    with pytest.raises(openai.AuthenticationError):
        OpenAI(base_url=keyed.url, api_key="wrong", max_retries=0).models.list()

    async def mcp_tools(key: str | None):
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        async with create_mcp_http_client(headers=headers) as http, \
                streamable_http_client(keyed.base + "/mcp", http_client=http) as (read, write), \
                ClientSession(read, write) as session:
            await session.initialize()
            return sorted(t.name for t in (await session.list_tools()).tools)

    assert asyncio.run(mcp_tools(KEY)) == ["add_documents", "ask_documents", "search_documents"]
    with pytest.raises(Exception):  # noqa: B017 - the SDK wraps the 401 in its own error types
        asyncio.run(mcp_tools(None))


def test_a_busy_model_refuses_at_once_with_429(keyed):
    c = OpenAI(base_url=keyed.url, api_key=KEY, max_retries=0, timeout=600)
    long = [{"role": "user", "content": "Count from 1 to 500, separated by commas."}]
    stream = c.chat.completions.create(model=MODEL, messages=long, max_tokens=64, stream=True)
    first = next(iter(stream))  # the model is now busy with this answer
    assert first.choices[0].delta.role == "assistant"
    rest, ended = [], []  # the running answer, read as it comes, and when its last chunk came
    drain = threading.Thread(target=lambda: (rest.extend(ch.choices[0].delta.content or "" for ch in stream),
                                             ended.append(time.monotonic())))
    drain.start()
    with pytest.raises(openai.RateLimitError) as caught:
        c.chat.completions.create(model=MODEL, messages=COLOURS, max_tokens=2)
    refused = time.monotonic()
    drain.join(600)
    assert ended and refused < ended[0], "refused only once the running answer had ended: it was queued"
    assert caught.value.body["code"] == "queue_full" and "retry later" in caught.value.body["message"]
    assert "".join(rest)  # the running answer was not disturbed
    assert c.chat.completions.create(model=MODEL, messages=COLOURS, max_tokens=2).choices[0].message.content


def test_with_a_key_it_still_binds_loopback_only(keyed):
    listening = {cn.laddr.ip for cn in psutil.Process(keyed.proc.pid).net_connections(kind="inet")
                 if cn.status == psutil.CONN_LISTEN}
    assert listening == {"127.0.0.1"}
