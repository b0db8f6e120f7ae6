"""The endpoint client's reading of what servers send, against a small local HTTP server that answers
as vLLM, Ollama and a broken server do (what llama-server itself does: test_llama_server.py).

Every failure must be one EndpointError of the right kind with a one-line message naming the URL.

Run: .venv/bin/python -m pytest tests/endpoint/test_endpoint_errors.py -q
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from localrag.backends.endpoint import EndpointConfig, EndpointEngine, EndpointError, _sse_data
from localrag.backends.llama_server import free_port
from localrag.config import GenerationConfig

HELLO = [{"role": "user", "content": "hello"}]


def _delta(text: str, finish: str | None = None) -> dict:
    return {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": finish}]}


class _Fake(BaseHTTPRequestHandler):
    """Behaves by the request's model name (see BEHAVIOUR)."""

    def log_message(self, *args) -> None:
        pass

    def _send(self, status: int, body, content_type: str = "application/json") -> None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _events(self, events: list, pause: float = 0.0) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for event in events:
            data = event if isinstance(event, str) else json.dumps(event)
            self.wfile.write(f": keep-alive\nevent: message\ndata: {data}\n\n".encode())
            self.wfile.flush()
            time.sleep(pause)

    def do_GET(self) -> None:
        if self.path == "/v1/models":
            self._send(200, {"object": "list", "data": [{"id": "alpha"}, {"id": "beta"}]})
        else:
            self._send(404, b"Not Found", "text/plain")

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path != "/v1/chat/completions":
            return self._send(404, {"detail": "Not Found"})
        model = body["model"]
        if model == "alpha":  # a well-behaved server without usage counts
            return self._events([_delta("Hel"), _delta("lo"), _delta("!", "stop"), "[DONE]"], pause=0.01)
        if model == "slow":
            time.sleep(1.0)
            return self._events([_delta("late", "stop"), "[DONE]"])
        responses = {
            "auth": (401, {"error": {"message": "Invalid API Key", "type": "authentication_error"}}),
            "oom": (500, {"error": {"message": "CUDA out of memory.\nTried to allocate", "type": "server_error"}}),
            "ollama-missing": (404, {"error": 'model "ollama-missing" not found, try pulling it first'}),
            "vllm-missing": (404, {"object": "error", "message": "The model `vllm-missing` does not exist.",
                                   "type": "NotFoundError", "code": 404}),
            "bad": (400, {"error": {"message": "max_tokens must be at least 1", "type": "invalid_request_error"}}),
            "teapot": (418, b"short and stout"),
            "html": (200, b"<html>a login page</html>"),
        }
        if model in responses:
            status, payload = responses[model]
            return self._send(status, payload, "text/html" if isinstance(payload, bytes) else "application/json")
        events = {
            "cut": [_delta("Half an ans"), _delta("wer")],  # the connection closes: no finish, no [DONE]
            "error-event": [_delta("Start"), {"error": {"code": 500, "message": "slot crashed"}}],
            "garbage": ["<html>not json</html>"],
        }
        self._events(events[model])


@pytest.fixture(scope="module")
def fake():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Fake)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _error(fake: str, model: str, **config) -> EndpointError:
    with EndpointEngine(EndpointConfig(fake, model=model, **config)) as engine, pytest.raises(EndpointError) as caught:
        engine.chat(HELLO, GenerationConfig(max_tokens=8)).run()
    err = caught.value
    assert "\n" not in str(err) and err.url in str(err) and "Traceback" not in str(err)
    return err


@pytest.mark.parametrize(("model", "kind", "status", "says"), [
    ("auth", "auth", 401, "Invalid API Key"),
    ("oom", "server", 500, "CUDA out of memory. Tried to allocate"),
    ("ollama-missing", "model", 404, "try pulling it first"),
    ("vllm-missing", "model", 404, "does not exist"),
    ("bad", "client", 400, "max_tokens must be at least 1"),
    ("teapot", "client", 418, "short and stout"),
    ("html", "server", 200, "something other than OpenAI's JSON"),
    ("cut", "cut", None, "ended the stream before the answer was complete"),
    ("error-event", "server", None, "slot crashed"),
    ("garbage", "server", None, "not OpenAI's JSON"),
])
def test_each_failure_is_one_error_of_its_kind(fake, model, kind, status, says):
    err = _error(fake, model, max_concurrent=1)
    assert (err.kind, err.status) == (kind, status) and says in str(err), str(err)


def test_a_stream_is_read_piece_by_piece_without_usage(fake):
    with EndpointEngine(EndpointConfig(fake + "/v1/", model="alpha")) as engine:
        gen = engine.chat(HELLO, GenerationConfig(max_tokens=8))
        assert list(gen) == ["Hel", "lo", "!"] and gen.text == "Hello!"
        assert gen.finish_reason == "stop" and gen.stats.stop_reason == "eog"
        assert not gen.usage_reported and gen.stats.generated_tokens == 3  # pieces counted instead
        assert gen.ttft_s > 0 and gen.stats.decode_seconds > 0 and gen.logprobs is None
        with pytest.raises(RuntimeError, match="runs once"):
            list(gen)
        assert engine.models() == ["alpha", "beta"]


def test_no_model_configured_takes_the_first_listed_and_check_catches_a_wrong_name(fake):
    with EndpointEngine(EndpointConfig(fake)) as engine:
        assert engine.model == "alpha" and engine.chat(HELLO).run().text == "Hello!"
    with EndpointEngine(EndpointConfig(fake, model="gamma")) as engine, pytest.raises(EndpointError) as caught:
        engine.check()
    assert caught.value.kind == "model" and "it serves alpha, beta" in str(caught.value)


def test_a_server_that_sends_nothing_in_time_is_a_timeout(fake):
    err = _error(fake, "slow", timeout_s=0.2)
    assert err.kind == "timeout" and "sent nothing for 0.2 s" in str(err) and "raise timeout_s" in str(err)


def test_a_port_nobody_listens_on_is_down_and_a_wrong_path_says_what_the_url_should_be(fake):
    url = f"http://127.0.0.1:{free_port()}/v1"
    with EndpointEngine(EndpointConfig(url, model="x")) as engine, pytest.raises(EndpointError) as caught:
        engine.models()
    assert caught.value.kind == "down" and "connection refused" in str(caught.value)
    assert f"cannot reach {url}/models" in str(caught.value) and "start the server" in str(caught.value)
    err = _error(fake + "/api", "alpha")
    assert err.kind == "client" and err.status == 404 and "ending in /v1" in str(err)


def test_cancel_stops_a_stream_between_pieces(fake):
    cancel = threading.Event()
    with EndpointEngine(EndpointConfig(fake, model="alpha")) as engine:
        gen = engine.chat(HELLO, cancel=cancel)
        pieces = []
        for piece in gen:
            pieces.append(piece)
            cancel.set()
    assert pieces == ["Hel"] and gen.finish_reason == "cancelled" and gen.stats.stop_reason == "cancelled"


def test_concurrently_runs_calls_together_yields_in_order_and_raises_after_all_have_ended(fake):
    together = threading.Barrier(2, timeout=10)  # two calls meet only if they run at once

    def meet(text: str) -> str:
        together.wait()
        return text

    with EndpointEngine(EndpointConfig(fake, model="alpha", max_concurrent=2)) as engine:
        assert list(engine.concurrently([lambda: meet("a"), lambda: meet("b")])) == ["a", "b"]
        gens = [engine.chat(HELLO, GenerationConfig(max_tokens=8)) for _ in range(3)]
        assert [g.text for g in engine.concurrently([g.run for g in gens])] == ["Hello!"] * 3
        first, bad, late = (engine.chat(HELLO, GenerationConfig(max_tokens=8), extra={"model": m})
                            for m in ("alpha", "oom", "slow"))
        got = []
        with pytest.raises(EndpointError) as caught:
            for g in engine.concurrently([first.run, bad.run, late.run]):
                got.append(g.text)
        assert caught.value.kind == "server" and got == ["Hello!"] and late.text == "late"  # it had ended


def test_sse_data_joins_multiline_events_and_drops_comments():
    lines = [": comment", "event: x", "data: {\"a\":", "data: 1}", "", "", "data:[DONE]"]
    assert list(_sse_data(iter(lines))) == ['{"a":\n1}', "[DONE]"]


def test_config_checks_and_the_request_body():
    with pytest.raises(ValueError, match="http:// or https://"):
        EndpointConfig("127.0.0.1:8080")
    with pytest.raises(ValueError, match="must be > 0"):
        EndpointConfig("http://h", timeout_s=0)
    assert EndpointConfig("http://h:1").base == EndpointConfig("http://h:1/v1/").base == "http://h:1/v1"
    with EndpointEngine(EndpointConfig("http://h:1", model="m", api_key="k")) as engine:
        cfg = GenerationConfig(max_tokens=5, temperature=0.7, top_p=0.9, top_k=40, seed=3, stop=("\n\n",))
        body = engine.request(HELLO, cfg, top_logprobs=0, extra={"cache_prompt": False})
        assert engine._headers == {"Authorization": "Bearer k"}
    assert body == {"model": "m", "messages": HELLO, "max_tokens": 5, "temperature": 0.7, "stream": True,
                    "stream_options": {"include_usage": True}, "top_p": 0.9, "top_k": 40, "seed": 3,
                    "stop": ["\n\n"], "logprobs": True, "top_logprobs": 0, "cache_prompt": False}
