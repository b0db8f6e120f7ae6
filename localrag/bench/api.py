"""The API's overhead: time to first token and decode tokens/s of a streamed answer through
``/v1/chat/completions`` against the same generation in-process.

The server is ``python -m localrag serve`` on a free loopback port (same model, same settings);
the client is a real HTTP/1.1 client (the standard library's ``http.client``, over a kept-alive
connection) reading the server-sent events as they arrive. Both sides answer the same prompts
greedily with the KV cache handled as the API handles it (the reused prompt prefix kept on a
deterministic backend, an empty cache otherwise), interleaved (in-process then API, then the reverse order the next
round), and every ratio compares the two runs of one prompt in one round. Reported: medians over
prompts x rounds, and whether the texts were identical.

    python -m localrag bench api [--model NAME|PATH] [--rounds 5] [--max-new-tokens 64] [--url URL] [--json]

Times: TTFT from the call to the first text piece (for the API: from sending the request);
decode tokens/s = (tokens - 1) / (last piece - first piece), the same clock on both sides. Every
timed call starts on a settled machine (``SETTLE_S``): llama.cpp's OpenMP worker spins on for
~10 ms after a generation, so without the pause each API request (which nearly always follows an
in-process run) shared the cores with this process's spinning worker (measured on 2 cores: 7-9 ms
of its CPU inside every API call, none after the pause), while the server's worker, whose thread
had ended, left the in-process calls alone. The client's reading loop only stamps the bytes as they
arrive and parses the events after the stream: on the cores the server computes on, the client's
own work is not the API's (httpx reading lines and parsing each event took 11.0 ms of CPU per
64-token answer; http.client's read1, parsed afterwards, 4.9 ms).
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

from localrag.bench.common import alternate, median_ratio, output
from localrag.config import GenerationConfig, ModelConfig
from localrag.engine import Engine

PROMPTS = (
    "Write a short story about a lighthouse keeper who finds a message in a bottle.",
    "Explain how a refrigerator keeps food cold, step by step.",
    "List ten tips for growing tomatoes in a small garden.",
    "Describe a walk through a busy market on a rainy morning.",
)
SETTLE_S = 0.05  # before every timed call: past the OpenMP spin after the last one


@dataclass(frozen=True)
class Timing:
    ttft_s: float
    decode_tps: float
    tokens: int
    text: str


def add_bench_cli(sub) -> None:
    p = sub.add_parser("api", help="time to first token and tokens/s through the HTTP API vs in-process")
    p.add_argument("--model", default=ModelConfig().model)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--url", default=None,
                   help="measure a server already running with the same model (default: start one)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_api)


@dataclass(frozen=True)
class ApiRound:
    """One prompt answered both ways in one round (in the order ``alternate`` gave the round)."""

    round: int
    prompt: str
    in_process: Timing
    api: Timing


def in_process(engine: Engine, prompt: str, gen: GenerationConfig) -> Timing:
    time.sleep(SETTLE_S)
    if not engine.backend.deterministic:  # the cache as the API leaves it (localrag.api.answering):
        engine.backend.truncate(0)  # a deterministic backend keeps the reused prompt prefix, others start empty
    t0 = time.perf_counter()
    first = last = None
    generation = engine.chat([{"role": "user", "content": prompt}], gen)
    for _ in generation:
        last = time.perf_counter()
        first = first or last
    n = generation.stats.generated_tokens
    return Timing(first - t0, (n - 1) / (last - first), n, generation.text)


def through_api(conn: http.client.HTTPConnection, model: str, prompt: str, gen: GenerationConfig) -> Timing:
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": prompt}],
                       "max_tokens": gen.max_tokens, "temperature": 0, "stream": True,
                       "stream_options": {"include_usage": True}})
    arrived: list[tuple[float, bytes]] = []
    time.sleep(SETTLE_S)
    t0 = time.perf_counter()
    conn.request("POST", "/v1/chat/completions", body=body, headers={"Content-Type": "application/json"})
    response = conn.getresponse()
    if response.status != 200:
        raise RuntimeError(f"the API answered {response.status}: {response.read()[:500]!r}")
    while data := response.read1():
        arrived.append((time.perf_counter(), data))
    pieces: list[str] = []
    first = last = None
    n = 0
    for at, event in sse_events(arrived):
        if event.get("usage"):
            n = event["usage"]["completion_tokens"]
        for choice in event["choices"]:
            if choice["delta"].get("content"):
                first, last = first or at, at
                pieces.append(choice["delta"]["content"])
    return Timing(first - t0, (n - 1) / (last - first), n, "".join(pieces))


def sse_events(arrived: list[tuple[float, bytes]]) -> Iterator[tuple[float, dict]]:
    """The JSON events of a server-sent event stream, each with the time its last byte arrived."""
    pending = b""
    for at, data in arrived:
        *complete, pending = (pending + data).split(b"\n\n")
        for event in complete:
            if event.startswith(b"data: ") and event != b"data: [DONE]":
                yield at, json.loads(event[6:])


def connect(url: str) -> http.client.HTTPConnection:
    parts = urllib.parse.urlsplit(url)
    kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    return kind(parts.hostname, parts.port, timeout=600)


class ServerProcess:
    """``python -m localrag serve`` on a free port with throwaway index and data folders (or
    ``folder``'s index/ and data/, which its owner removes)."""

    def __init__(self, model: str, folder: Path | None = None) -> None:
        self.tmp = tempfile.TemporaryDirectory(prefix="localrag-bench-api-")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        tmp = folder or Path(self.tmp.name)
        self.log = open(tmp / "serve.log", "w")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "localrag", "serve", "--port", str(self.port), "--model", model,
             "--index-dir", str(tmp / "index"), "--data-dir", str(tmp / "data")],
            env={**os.environ, "HF_HUB_OFFLINE": "1"}, stdout=self.log, stderr=subprocess.STDOUT)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def wait_ready(self, timeout: float = 300) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited: {Path(self.log.name).read_text()[-2000:]}")
            try:
                httpx.get(self.url + "/v1/models", timeout=5).raise_for_status()
                return
            except httpx.HTTPError:
                time.sleep(0.5)
        raise RuntimeError("the server did not start in time")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()
        self.tmp.cleanup()


def cmd_api(args) -> int:
    server = None if args.url else ServerProcess(args.model)
    try:
        engine = Engine.load(ModelConfig(model=args.model))
        if server is not None:
            server.wait_ready()
        gen = GenerationConfig(max_tokens=args.max_new_tokens)
        rows = []
        conn = connect(args.url or server.url)
        sides = {"in_process": lambda prompt: in_process(engine, prompt, gen),
                 "api": lambda prompt: through_api(conn, engine.model_name, prompt, gen)}
        try:
            sides["api"](PROMPTS[0])  # warm-up: both sides once
            sides["in_process"](PROMPTS[0])
            for r in range(args.rounds):
                for prompt in PROMPTS:
                    timings = {side: sides[side](prompt) for side in alternate(sides, r)}
                    rows.append(ApiRound(r, prompt, in_process=timings["in_process"], api=timings["api"]))
        finally:
            conn.close()
        engine.close()
    finally:
        if server is not None:
            server.stop()
    return output(summarize(rows, args), args.json, print_api)


def summarize(rows: list[ApiRound], args) -> dict:
    def med(side: str, key: str) -> float:
        return statistics.median(getattr(getattr(row, side), key) for row in rows)

    def ratio(key: str) -> float:
        return median_ratio([getattr(r.api, key) for r in rows], [getattr(r.in_process, key) for r in rows])

    same = sum(r.api.text == r.in_process.text for r in rows)
    return {"model": args.model, "rounds": args.rounds, "prompts": len(PROMPTS), "max_new_tokens": args.max_new_tokens,
            "in_process": {"ttft_s": med("in_process", "ttft_s"), "decode_tps": med("in_process", "decode_tps")},
            "api": {"ttft_s": med("api", "ttft_s"), "decode_tps": med("api", "decode_tps")},
            "ttft_ratio_api_over_in_process": ratio("ttft_s"),
            "decode_tps_ratio_api_over_in_process": ratio("decode_tps"), "identical_texts": f"{same}/{len(rows)}"}


def print_api(result: dict) -> None:
    print(f"model {result['model']}: {result['prompts']} prompts x {result['rounds']} rounds, "
          f"{result['max_new_tokens']} new tokens, greedy, the KV cache as the API leaves it (medians)")
    print(f"  in-process   TTFT {result['in_process']['ttft_s'] * 1000:7.1f} ms   "
          f"decode {result['in_process']['decode_tps']:6.1f} tok/s")
    print(f"  API (SSE)    TTFT {result['api']['ttft_s'] * 1000:7.1f} ms   decode {result['api']['decode_tps']:6.1f} tok/s")
    print(f"  ratio API / in-process: TTFT {result['ttft_ratio_api_over_in_process']:.3f}, decode tokens/s "
          f"{result['decode_tps_ratio_api_over_in_process']:.3f}   (identical texts {result['identical_texts']})")
