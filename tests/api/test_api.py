"""The OpenAI-compatible API and the MCP tools against a real server, with real clients: the
official ``openai`` package and the ``mcp`` package's client session. One server for the module
(``python -m localrag serve``, bundled model, a real index), small max_tokens.

Run: HF_HUB_OFFLINE=1 .venv/bin/python -m pytest tests/api/test_api.py -q
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time

import httpx
import numpy as np
import openai
import psutil
import pytest
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from openai import OpenAI

from localrag.api.answering import Grounding
from localrag.evidence import EvidenceAligner
from localrag.rag.records import Hit
from localrag.results import Citation
from tests.api.conftest import MODEL

pytestmark = pytest.mark.slow

COLOURS = [{"role": "user", "content": "Name three colours."}]
PASSAGE = ("The harbour master logs every ship that enters the port. The blue ferry Aurora leaves for the "
           "island at seven in the morning and returns at six in the evening.")


def client(server, key: str = "unused") -> OpenAI:
    return OpenAI(base_url=server.url, api_key=key, max_retries=0, timeout=600)


def extra(obj, name: str):
    return (obj.model_extra or {})[name]


def test_models_lists_the_registry_and_the_embedder(server):
    ids = [m.id for m in client(server).models.list()]
    assert ids[0] == MODEL  # the loaded model first
    assert "gemma3-270m" in ids and "all-MiniLM-L6-v2" in ids


def test_streamed_and_non_streamed_answers_are_identical(server):
    c = client(server)
    full = c.chat.completions.create(model=MODEL, messages=COLOURS, max_tokens=16, temperature=0)
    text = full.choices[0].message.content
    assert text.strip() and full.choices[0].finish_reason in ("stop", "length")
    assert full.usage.completion_tokens > 0 and full.usage.prompt_tokens > 0
    speed = extra(full.usage, "speedup")
    assert speed["mode"] == "plain" and speed["tokens_per_s"] > 0 and speed["speedup_vs_plain"] == 1.0
    chunks = list(c.chat.completions.create(model=MODEL, messages=COLOURS, max_tokens=16, temperature=0,
                                            stream=True, stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    streamed = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert streamed == text
    finishes = [ch.choices[0].finish_reason for ch in chunks if ch.choices and ch.choices[0].finish_reason]
    assert finishes == [full.choices[0].finish_reason]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == full.usage.completion_tokens


def test_speedup_writes_plain_text_with_its_speed_stats(server):
    c = client(server)
    messages = [{"role": "system", "content": PASSAGE}, {"role": "user", "content": "Repeat the text word for word."}]
    plain = c.chat.completions.create(model=MODEL, messages=messages, max_tokens=32, temperature=0)
    fast = c.chat.completions.create(model=MODEL, messages=messages, max_tokens=32, temperature=0,
                                     extra_body={"mode": "speedup"})
    assert fast.choices[0].message.content == plain.choices[0].message.content
    speed = extra(fast.usage, "speedup")
    assert speed["mode"] == "speedup" and speed["steps"] > 0 and speed["accepted_tokens_per_step"] >= 1.0
    assert speed["speedup_vs_plain"] > 0 and speed["tokens_per_s"] > 0
    # streamed, the several pieces of one accepted path often reach the socket as one event; an old
    # client's spelling of the mode ("rasd") is still understood
    chunks = c.chat.completions.create(model=MODEL, messages=messages, max_tokens=32, temperature=0, stream=True,
                                       extra_body={"mode": "rasd"})
    assert "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices) == plain.choices[0].message.content


def test_messages_over_the_context_are_refused_before_generating(server):
    too_long = [{"role": "user", "content": "word " * 5000}]  # ~5000 tokens; the context holds 4096
    with pytest.raises(openai.BadRequestError) as caught:
        client(server).chat.completions.create(model=MODEL, messages=too_long, max_tokens=4, stream=True)
    assert caught.value.body["code"] == "context_length_exceeded" and "4096" in caught.value.body["message"]


def test_a_citations_spans_are_its_supporting_passages_merged():
    """Two sentences supported by overlapping passages of one PDF chunk: the citation carries its
    page and one merged span, in the chunk's own character offsets."""
    text = "The Zephyr telescope was assembled in Quillfield in 2019. Its mirror was polished by Marta Ilves."
    hit = Hit("a", text, "/docs/zephyr.pdf", 4, None, None, (), 0.9, 3.0, 1.0)
    answer = "The Zephyr telescope was assembled in Quillfield. It was assembled in Quillfield in 2019."
    evidence = EvidenceAligner().align(answer, [hit])
    assert all(s.supported for s in evidence.sentences)
    grounding = Grounding([Citation.from_hit(hit)], evidence.supported, "", evidence)
    [cited] = grounding.to_dict()["citations"]
    ranges = sorted((sp.start, sp.end) for s in evidence.sentences for sp in s.spans)
    assert len(ranges) >= 2 and cited["page"] == 4
    assert [(s["start"], s["end"]) for s in cited["spans"]] == [(ranges[0][0], max(e for _, e in ranges))]
    assert cited["spans"][0]["text"].startswith("The Zephyr telescope was assembled in Quillfield")


def test_a_grounded_answer_carries_its_citations(server):
    c = client(server)
    question = [{"role": "user", "content": "Where was the Zephyr telescope assembled?"}]
    r = c.chat.completions.create(model=MODEL, messages=question, max_tokens=24, temperature=0,
                                  extra_body={"collection": "docs", "k": 2})
    grounding = extra(r, "localrag")
    content = r.choices[0].message.content
    assert content.strip() and not grounding["refused"] and grounding["on_unsupported"] == "warn"
    assert "zephyr.md" in grounding["citations"][0]["label"] and "Quillfield" in grounding["citations"][0]["text"]
    assert [c["label"] for c in grounding["also_searched"]] == ["garden.txt lines 1-4"]  # cited nothing
    evidence = grounding["evidence"]
    assert grounding["supported"] == evidence["supported"] and evidence["cited"][0] == grounding["citations"][0]["chunk_id"]
    for sentence in evidence["sentences"]:  # each sentence: where it sits, its support, its spans in the chunks
        assert content.strip()[sentence["start"]:sentence["end"]] == sentence["text"]
        assert isinstance(sentence["supported"], bool) and 0.0 <= sentence["score"] <= 1.0
        for span in sentence["spans"]:
            chunk = next(c for c in grounding["citations"] if c["chunk_id"] == span["chunk_id"])
            assert 0 <= span["start"] < span["end"] <= len(chunk["text"])
    first = grounding["citations"][0]  # where it is and what of it supports the answer, to highlight
    assert "page" in first and first["spans"] and all(s["text"] == first["text"][s["start"]:s["end"]]
                                                      for s in first["spans"])
    assert [(s["start"], s["end"]) for s in first["spans"]] == sorted({
        (sp["start"], sp["end"]) for s in evidence["sentences"] for sp in s["spans"]
        if sp["chunk_id"] == first["chunk_id"]})  # (one sentence here: nothing to merge)
    assert "[1]" in grounding["answer_with_citations"]
    assert grounding["answer_with_citations"].replace("[1]", "") == content.strip()
    assert 'collection "docs"' in grounding["searched"]
    assert extra(r.usage, "speedup")["mode"] == "plain"
    chunks = list(c.chat.completions.create(model=MODEL, messages=question, max_tokens=24, temperature=0,
                                            stream=True, extra_body={"collection": "docs", "k": 2}))
    assert "".join(ch.choices[0].delta.content or "" for ch in chunks) == r.choices[0].message.content
    last = chunks[-1]
    assert last.choices[0].finish_reason and extra(last, "localrag")["citations"] == grounding["citations"]


def test_a_follow_up_searches_with_the_earlier_messages(server):
    """The earlier turns of ``messages`` rewrite the search (``localrag.rag.followup``): the follow-up
    alone finds the garden notes; after a question about the telescope, the telescope's document."""
    c = client(server)
    first = {"role": "user", "content": "Where does the Zephyr telescope observe the sky from?"}
    followup = {"role": "user", "content": "How often does that happen?"}
    body = {"collection": "docs", "k": 1}

    def searched(messages):
        r = c.chat.completions.create(model=MODEL, messages=messages, max_tokens=8, temperature=0, extra_body=body)
        grounding = extra(r, "localrag")
        return grounding["searched"], [x["label"].split()[0] for x in grounding["citations"] + grounding["also_searched"]]

    said, found = searched([followup])
    assert found == ["garden.txt"] and 'searched "How often does that happen?" in' in said
    said, found = searched([first, {"role": "assistant", "content": "From the Quillfield ridge."}, followup])
    assert found == ["zephyr.md"] and 'searched "How often does that happen? Zephyr telescope observe sky" in' in said


def test_an_unsupported_answer_is_refused_when_asked(server):
    """on_unsupported=refuse: nothing about ibuprofen is in the documents, so the content is the
    refusal, with what was searched, and the answer the model wrote is kept apart; streamed, nothing
    of it is sent before the check, and the stream carries the same refusal."""
    c = client(server)
    question = [{"role": "user", "content": "What is the recommended dosage of ibuprofen for adults?"}]
    body = {"collection": "docs", "k": 2, "on_unsupported": "refuse"}
    r = c.chat.completions.create(model=MODEL, messages=question, max_tokens=24, temperature=0, extra_body=body)
    grounding = extra(r, "localrag")
    content = r.choices[0].message.content
    assert grounding["refused"] and not grounding["supported"] and grounding["citations"] == []
    assert content.startswith("Your documents do not support an answer to this question")
    assert content.endswith(f"What was searched: {grounding['searched']}")
    assert grounding["unsupported_answer"] and grounding["unsupported_answer"] not in content
    assert [s["supported"] for s in grounding["evidence"]["sentences"]] == [False] * len(grounding["evidence"]["sentences"])
    chunks = list(c.chat.completions.create(model=MODEL, messages=question, max_tokens=24, temperature=0,
                                            stream=True, extra_body=body))
    assert "".join(ch.choices[0].delta.content or "" for ch in chunks) == content
    warned = c.chat.completions.create(model=MODEL, messages=question, max_tokens=24, temperature=0,
                                       extra_body=body | {"on_unsupported": "warn"})
    assert warned.choices[0].message.content == grounding["unsupported_answer"]
    assert not extra(warned, "localrag")["refused"] and not extra(warned, "localrag")["supported"]


def test_embeddings_with_the_bundled_embedder(server):
    r = client(server).embeddings.create(model="all-MiniLM-L6-v2", input=[
        "The telescope mirror was polished.", "Someone polished the mirror of the telescope.", "Tomatoes need sun."])
    v = np.array([d.embedding for d in r.data])
    assert v.shape == (3, 384) and np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-3)
    assert v[0] @ v[1] > v[0] @ v[2] + 0.2
    assert r.usage.prompt_tokens > 10 and [d.index for d in r.data] == [0, 1, 2]


@pytest.mark.parametrize(("kwargs", "error", "status", "says"), [
    ({"model": "gpt-4o"}, openai.NotFoundError, 404, "model 'gpt-4o' is not available"),
    ({"temperature": 5}, openai.BadRequestError, 400, "temperature"),
    ({"messages": []}, openai.BadRequestError, 400, "messages"),
    ({"messages": [{"role": "system", "content": "hi"}]}, openai.BadRequestError, 400, "a user message"),
    ({"stop": ["a", "b", "c", "d", "e"]}, openai.BadRequestError, 400, "stop"),
    ({"n": 2}, openai.BadRequestError, 400, "n"),
    ({"extra_body": {"mode": "fast"}}, openai.BadRequestError, 400, "unknown mode 'fast'"),
    ({"extra_body": {"mode": "grounded"}}, openai.BadRequestError, 400, "give a collection"),
    ({"extra_body": {"collection": "nope"}}, openai.NotFoundError, 404, "collection 'nope' does not exist"),
    ({"extra_body": {"collection": "../etc"}}, openai.BadRequestError, 400, "collection"),
    ({"extra_body": {"k": 0}}, openai.BadRequestError, 400, "k"),
    ({"extra_body": {"on_unsupported": "ignore"}}, openai.BadRequestError, 400, "on_unsupported"),
    ({"extra_body": {"options": {"prefill": "fast"}}}, openai.BadRequestError, 400, "prefill must be one of exact, reuse"),
])
def test_chat_errors_in_the_openai_shape(server, kwargs, error, status, says):
    args = {"model": MODEL, "messages": COLOURS, "max_tokens": 4} | kwargs
    with pytest.raises(error) as caught:
        client(server).chat.completions.create(**args)
    assert caught.value.status_code == status
    body = caught.value.body
    assert says in body["message"] and body["type"] and "Traceback" not in json.dumps(body)


def test_other_errors_in_the_openai_shape(server):
    with pytest.raises(openai.NotFoundError, match="embedding model 'text-embedding-3-small'"):
        client(server).embeddings.create(model="text-embedding-3-small", input="x")
    with httpx.Client(base_url=server.url, timeout=60) as h:
        cases = [
            (h.post("/chat/completions", content=b"{not json"), 400, "not valid JSON"),
            (h.post("/chat/completions", content=b"[1, 2]"), 400, "JSON object"),
            (h.post("/chat/completions", content=b"x" * (2 << 20)), 413, "request body over"),
            (h.get("/nowhere"), 404, "not found"),
            (h.get("/chat/completions"), 405, "Method Not Allowed"),
            (h.post("/embeddings", json={"model": "all-MiniLM-L6-v2", "input": [1, 2]}), 400, "input"),
        ]
    for response, status, says in cases:
        assert response.status_code == status, response.text
        assert says in response.json()["error"]["message"] and "Traceback" not in response.text


def test_max_tokens_is_capped(server):
    r = client(server).chat.completions.create(model=MODEL, messages=COLOURS, max_tokens=10**9, temperature=0)
    assert r.choices[0].message.content and r.usage.completion_tokens <= 2048


def test_an_mcp_client_session_lists_the_tools_and_calls_search_and_ask(server):
    async def session():
        async with streamable_http_client(server.base + "/mcp") as (read, write), ClientSession(read, write) as s:
            await s.initialize()
            tools = {t.name: t for t in (await s.list_tools()).tools}
            found = await s.call_tool("search_documents", {"query": "who polished the mirror", "collection": "docs",
                                                           "k": 2})
            asked = await s.call_tool("ask_documents", {"question": "Who polished the mirror of the Zephyr telescope?",
                                                        "collection": "docs", "mode": "plain"})
            missing = await s.call_tool("search_documents", {"query": "x", "collection": "nope"})
            return tools, found, asked, missing

    tools, found, asked, missing = asyncio.run(session())
    assert set(tools) == {"search_documents", "ask_documents", "add_documents"}
    assert set(tools["ask_documents"].input_schema["properties"]) == {"question", "collection", "mode"}
    assert not found.is_error
    hits = json.loads(found.content[0].text)["hits"]  # the tool's JSON, as an MCP client reads it
    assert len(hits) == 2 and "zephyr.md" in hits[0]["source"] and "Marta Ilves" in hits[0]["text"]
    assert not asked.is_error
    answer = json.loads(asked.content[0].text)
    assert answer["answer"].strip() and answer["mode"] == "plain"
    # the cited chunks, then those searched but not cited (citations are computed from the answer's evidence)
    sources = answer["citations"] + answer["also_searched"]
    assert "zephyr.md" in sources[0]["label"] and answer["usage"]["completion_tokens"] > 0
    assert missing.is_error and "collection 'nope' does not exist" in missing.content[0].text


def test_four_concurrent_streams_complete_unmixed_and_memory_returns(server):
    c = client(server)
    prompts = ["Name three colours.", "Name three fruits.", "Name three animals.", "Name three countries."]

    def ask(prompt: str, stream: bool) -> str:
        args = {"model": MODEL, "messages": [{"role": "user", "content": prompt}], "max_tokens": 12,
                "temperature": 0}
        if not stream:
            return c.chat.completions.create(**args).choices[0].message.content
        return "".join(ch.choices[0].delta.content or "" for ch in c.chat.completions.create(stream=True, **args))

    alone = [ask(p, stream=False) for p in prompts]  # each answer by itself, one after the other
    assert len(set(alone)) == 4
    proc = psutil.Process(server.proc.pid)
    measured = []
    for _ in range(3):  # the first round warms the server's thread pools; then it must hold steady
        results: dict[int, str] = {}
        workers = [threading.Thread(target=lambda i=i, out=results: out.__setitem__(i, ask(prompts[i], stream=True)))
                   for i in range(4)]
        for w in workers:
            w.start()
        for w in workers:
            w.join(600)
        assert [results.get(i) for i in range(4)] == alone  # all complete, none mixed
        time.sleep(1.0)
        measured.append((proc.memory_info().rss, proc.num_threads()))
    (rss0, threads0), (_, _), (rss2, threads2) = measured
    grown = (rss2 - rss0) / 2**20
    assert grown < 16, f"server RSS grew {grown:.1f} MiB over 8 more concurrent answers"
    # no answer thread left behind: a leak would leave one thread per answer (8 more here), while
    # the server's worker pool may still start a thread now and then (seen: +1 in one run of 10)
    assert threads2 - threads0 < 4, f"{threads2 - threads0} more threads after 8 more answers"


def test_a_client_that_goes_away_cancels_its_answer(server):
    c = client(server)
    long = [{"role": "user", "content": "Count from 1 to 500, separated by commas."}]
    stream = c.chat.completions.create(model=MODEL, messages=long, max_tokens=1024, temperature=0, stream=True)
    pieces = []
    for ch in stream:
        pieces.append(ch.choices[0].delta.content or "")
        if len(pieces) > 4:
            break
    stream.close()  # the client disconnects after a few tokens of a ~1000-token answer
    r = c.chat.completions.create(model=MODEL, messages=long, max_tokens=64, temperature=0)
    usage = extra(r.usage, "speedup")
    # the abandoned answer stopped within a poll or two, not after ~1000 more tokens: the wait
    # behind it counted in tokens, at the pace the server wrote this answer's 64
    behind = usage["waited_s"] * usage["tokens_per_s"]
    assert behind < 200, f"waited {usage['waited_s']:.1f} s behind an abandoned answer, {behind:.0f} tokens' worth"


def test_a_bad_request_behind_a_running_answer_is_refused_at_once(server):
    c = client(server)
    long = [{"role": "user", "content": "Count from 1 to 500, separated by commas."}]
    chunks = iter(c.chat.completions.create(model=MODEL, messages=long, max_tokens=300, temperature=0, stream=True,
                                            stream_options={"include_usage": True}))
    next(chunks), next(chunks)  # the long answer is running
    ended: list[float] = []  # when its last chunk came, read as it comes
    drain = threading.Thread(target=lambda: (list(chunks), ended.append(time.monotonic())))
    drain.start()
    with pytest.raises(openai.NotFoundError):
        c.chat.completions.create(model="gpt-4o", messages=COLOURS, max_tokens=4)
    refused = time.monotonic()
    drain.join(600)
    assert ended and refused < ended[0], "the refusal waited for the running answer to end"


def test_bench_api_reports_paired_ratios(server, capsys):
    """The benchmark command runs end to end (timings are its output, not asserted)."""
    from localrag.__main__ import main

    assert main(["bench", "api", "--url", server.base, "--model", MODEL, "--rounds", "1", "--max-new-tokens", "4",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["identical_texts"] == "4/4"  # the same generation on both sides
    assert out["ttft_ratio_api_over_in_process"] > 0 and out["decode_tps_ratio_api_over_in_process"] > 0


def test_binds_loopback_only(server):
    listening = [cn.laddr for cn in psutil.Process(server.proc.pid).net_connections(kind="inet")
                 if cn.status == psutil.CONN_LISTEN]
    assert listening and {a.ip for a in listening} == {"127.0.0.1"}
    assert {a.port for a in listening} == {server.port}
    for ip in _non_loopback_ips():
        with socket.socket() as s, pytest.raises(OSError):
            s.settimeout(2)
            s.connect((ip, server.port))


def _non_loopback_ips() -> list[str]:
    return [a.address for addrs in psutil.net_if_addrs().values() for a in addrs
            if a.family == socket.AF_INET and not a.address.startswith("127.")]


def test_a_long_prompt_streams_its_reading_progress_as_keep_alives(server):
    """While a long prompt is read, the stream sends SSE comments saying how far it got (clients
    skip them); the text that follows is the same as without a stream."""
    story = " ".join(f"Lantern {i} stands on the pier and burns whale oil until dawn." for i in range(60))
    body = {"model": MODEL, "max_tokens": 8, "temperature": 0, "stream": True,
            "messages": [{"role": "user", "content": f"{story}\n\nHow many lanterns are there?"}]}
    lines = []
    with httpx.stream("POST", server.url + "/chat/completions", json=body, timeout=600) as reply:
        assert reply.status_code == 200
        lines = [line for line in reply.iter_lines() if line]
    comments = [line for line in lines if line.startswith(":")]
    first_text = next(i for i, line in enumerate(lines) if '"content": "' in line and '"content": ""' not in line)
    assert comments and all(lines.index(c) < first_text for c in comments)  # before the first words
    counts = [tuple(map(int, c.split(": ", 2)[2].split(" tokens")[0].split(" of "))) for c in comments]
    assert all("Reading the conversation" in c for c in comments)
    total = counts[0][1]
    # one comment per piece read (128 tokens) until the text starts (a last one sent with it is left out)
    assert total > 600 and all(t == total for _, t in counts) and len(counts) >= 3
    assert [d for d, _ in counts] == sorted({d for d, _ in counts}) and counts[-1][0] >= total - 2 * 128
    streamed = "".join(json.loads(line[len("data: "):])["choices"][0]["delta"].get("content") or ""
                       for line in lines if line.startswith("data: {") and '"choices": [{' in line)
    whole = client(server).chat.completions.create(**{**body, "stream": False})
    assert streamed == whole.choices[0].message.content
