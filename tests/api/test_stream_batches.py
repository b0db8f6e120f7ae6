"""Pieces that reach the event loop together go out as one server-sent event (``stream_bytes``):
the official ``openai`` client reads such a stream exactly as it reads one event per piece.

The bytes are the route's own, handed to the client through httpx's MockTransport (the client's
SSE parsing and chunk models are what is under test; the server end to end is in test_api.py).
"""

from __future__ import annotations

import httpx2
import openai
import pytest
from openai import OpenAI

from localrag.api.answering import ChatReply
from localrag.api.errors import ApiError
from localrag.api.routes import Batch, Failed, Finished, Piece, stream_bytes
from localrag.api.schemas import parse_chat
from localrag.results import AnswerStats

MODEL = "smollm2-135m-instruct"
MESSAGES = [{"role": "user", "content": "What colour is the sky?"}]
REQ = parse_chat({"model": MODEL, "messages": MESSAGES, "stream": True, "stream_options": {"include_usage": True}})
PIECES = ["The", " sky", " is", " blue", " ☀", "."]
ANSWER = ChatReply(text="".join(PIECES), finish_reason="stop", stats=AnswerStats(mode="plain"), prompt_tokens=9,
                   completion_tokens=len(PIECES))


def stream_of(batches: list[Batch]) -> bytes:
    return b"".join(stream_bytes("chatcmpl-1", 1700000000, REQ, b, opening=i == 0) for i, b in enumerate(batches))


def read_with_openai(body: bytes) -> list:
    def replay(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, content=body, headers={"content-type": "text/event-stream"})

    http = openai.DefaultHttpxClient(transport=httpx2.MockTransport(replay))
    client = OpenAI(base_url="http://127.0.0.1:9/v1", api_key="unused", max_retries=0, http_client=http)
    return list(client.chat.completions.create(model=MODEL, messages=MESSAGES, stream=True,
                                               stream_options={"include_usage": True}))


def test_pieces_sent_together_read_as_one_event_per_piece():
    one_each = stream_of([Batch(p, None) for p in PIECES] + [Batch("", Finished(ANSWER))])
    together = stream_of([Batch.of([Piece(p) for p in PIECES[:2]]),  # the first write: role + two pieces
                          Batch.of([Piece(p) for p in PIECES[2:]] + [Finished(ANSWER)])])  # the rest + the end
    assert together.count(b"data: ") == 6 < one_each.count(b"data: ") == 10  # role, text x2, finish, usage, DONE
    for body in (one_each, together):
        chunks = read_with_openai(body)
        assert chunks[0].choices[0].delta.role == "assistant"
        assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == ANSWER.text
        assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["stop"]
        assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == len(PIECES)
        assert chunks[-1].usage.model_extra["speedup"]["mode"] == "plain"


def test_an_error_after_the_first_pieces_ends_the_stream_it_shares_a_write_with():
    failed = Failed(ApiError(500, "RuntimeError: the model stopped", code="generation_failed"))
    body = stream_of([Batch.of([Piece("The"), Piece(" sky"), failed])])
    assert body.endswith(b"data: [DONE]\n\n") and b"the model stopped" in body
    with pytest.raises(openai.APIError, match="the model stopped"):  # the error event, read after the text
        read_with_openai(body)


def test_a_batch_keeps_its_pieces_in_order_and_ends_only_with_the_last_event():
    assert Batch.of([Piece("a"), Piece("b")]) == Batch("ab", None)
    done = Finished(ANSWER)
    assert Batch.of([Piece("a"), done]) == Batch("a", done)
    assert Batch.of([done]) == Batch("", done)
