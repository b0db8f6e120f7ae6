"""A stop (Ctrl-C, SIGTERM) ends the open responses (``EndStreams``): a response that has not begun
gets a short grace to finish on its own; cancelled, Gradio's unqueued handler printed a traceback."""

from __future__ import annotations

import asyncio

from localrag.api.app import STOP_GRACE_S, EndStreams


def _serve_through_a_stop(app, stop_after_s: float) -> list[dict]:
    streams, sent = EndStreams(app), []

    async def send(message) -> None:
        sent.append(message)

    async def receive() -> dict:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def main() -> None:
        request = asyncio.ensure_future(streams({"type": "http"}, receive, send))
        await asyncio.sleep(stop_after_s)
        streams.stop()
        await request

    asyncio.run(main())
    return sent


def test_a_stop_lets_a_response_that_has_not_begun_finish():
    async def slow(scope, receive, send) -> None:  # a handler waiting for a worker thread, then answering
        await asyncio.sleep(0.3)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"done", "more_body": False})

    assert STOP_GRACE_S > 0.3
    sent = _serve_through_a_stop(slow, 0.05)
    assert sent[0]["status"] == 200 and sent[-1]["body"] == b"done"  # not cancelled into a 503


def test_a_stop_ends_a_stream_at_once():
    async def stream(scope, receive, send) -> None:  # an event stream that never ends by itself
        await send({"type": "http.response.start", "status": 200, "headers": []})
        while True:
            await send({"type": "http.response.body", "body": b"tick", "more_body": True})
            await asyncio.sleep(0.05)

    sent = _serve_through_a_stop(stream, 0.2)
    assert sent[-1] == {"type": "http.response.body", "body": b"", "more_body": False}
