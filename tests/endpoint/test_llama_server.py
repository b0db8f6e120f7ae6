"""The endpoint client against a real llama-server (tests/endpoint/conftest.py) serving the bundled
SmolLM2-135M: streaming, concurrent requests, logprobs, a server killed mid-answer, an API key, a
timeout, and what llama-server does with a model name it does not serve.

Run: .venv/bin/python -m pytest tests/endpoint -q -m slow   (the first run builds llama-server)
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import replace

import pytest

from localrag.backends.endpoint import EndpointEngine, EndpointError
from localrag.backends.llama_server import LlamaServer, LlamaServerError
from localrag.config import GenerationConfig

ALIAS = "smollm2"  # the name the fixture's server lists (tests/endpoint/conftest.py)
pytestmark = pytest.mark.slow

ASK = [{"role": "user", "content": "Write a short story about a lighthouse keeper and a storm."}]
GREEDY = GenerationConfig(max_tokens=48, temperature=0.0)
FRESH = {"cache_prompt": False}  # every request computes its prompt whole: the same kernels each time


def _one_line(err: EndpointError) -> str:
    text = str(err)
    assert "\n" not in text and "Traceback" not in text and err.url in text
    return text


def test_a_streamed_answer_comes_in_pieces_and_equals_the_whole_one(engine):
    same = {"id_slot": 0, **FRESH}  # one slot: the same KV cells, so the same attention sums
    whole = engine.chat(ASK, GREEDY, stream=False, extra=same).run()
    gen = engine.chat(ASK, GREEDY, extra=same)
    pieces, arrivals = [], []
    for piece in gen:
        pieces.append(piece)
        arrivals.append(time.perf_counter())
    assert len(pieces) >= 10 and "".join(pieces) == gen.text == whole.text and gen.text.strip()
    # the first piece's time is when it came: after the request went out, before we saw it
    assert gen.started_at < gen.started_at + gen.ttft_s <= arrivals[0] <= arrivals[-1]
    for g in (gen, whole):
        assert g.usage_reported and g.finish_reason in ("stop", "length")
        assert g.stats.prompt_tokens > 10 and g.stats.generated_tokens > 0
    assert (gen.stats.prompt_tokens, gen.stats.generated_tokens) == (whole.stats.prompt_tokens,
                                                                      whole.stats.generated_tokens)
    assert gen.stats.generated_tokens <= GREEDY.max_tokens
    assert gen.stats.stop_reason == ("length" if gen.finish_reason == "length" else "eog")
    assert gen.ttft_s > 0 and gen.stats.prefill_seconds == gen.ttft_s and gen.stats.decode_tps > 0
    assert gen.server_timings and gen.server_timings["predicted_n"] == gen.stats.generated_tokens
    assert engine.models() == [ALIAS]


def test_concurrent_requests_are_decoded_together(engine):
    asks = [[{"role": "user", "content": f"Count slowly from {n} upwards, one number per line."}] for n in (1, 50)]
    config = GenerationConfig(max_tokens=40, temperature=0.0)
    gens = engine.chat_many(asks, config, extra={"ignore_eos": True, **FRESH})
    assert all(g.finish_reason == "length" and g.stats.generated_tokens == 40 and g.text for g in gens)
    first = [g.started_at + g.ttft_s for g in gens]
    last = [g.started_at + g.ttft_s + g.stats.decode_seconds for g in gens]
    # the server's two slots ran them at once: each had streamed its first piece before either ended
    assert max(first) < min(last), (first, last)


def test_logprobs_are_returned_and_a_yes_no_choice_is_scored(engine):
    gen = engine.chat(ASK, GenerationConfig(max_tokens=8, temperature=0.0), top_logprobs=3, extra=FRESH).run()
    assert gen.logprobs_returned and len(gen.logprobs) == gen.stats.generated_tokens
    for step in gen.logprobs:
        assert step.logprob <= 0 and 1 <= len(step.top) <= 3
        assert step.top[0][0] == step.token  # greedy: the chosen token is the most likely one
    assert "".join(step.token for step in gen.logprobs) == gen.text
    assert engine.chat(ASK, GenerationConfig(max_tokens=4), extra=FRESH).run().logprobs is None  # not asked

    question = [{"role": "user", "content": "Is Paris the capital of France? Answer Yes or No."}]
    scores = engine.choice_logprobs(question, ("Yes", "No"))
    assert scores is not None and any(v is not None for v in scores.values())
    assert all(v is None or (v <= 0 and math.isfinite(v)) for v in scores.values())


def test_llama_server_answers_whatever_model_name_a_request_carries_and_check_catches_it(server):
    """llama-server serving one model ignores the request's model name (this version: 0.3.36's
    vendored llama.cpp); ``EndpointEngine.check()`` is how a wrong name is caught there."""
    with EndpointEngine(server.endpoint(model="no-such-model")) as engine:
        gen = engine.chat(ASK, GenerationConfig(max_tokens=4), extra=FRESH).run()
        assert gen.text and gen.finish_reason in ("stop", "length")
        with pytest.raises(EndpointError) as caught:
            engine.check()
    assert caught.value.kind == "model" and f"it serves {ALIAS}" in _one_line(caught.value)


def test_a_server_killed_mid_answer_is_cut_or_down_never_a_traceback(server_exe, server_config):
    with LlamaServer(replace(server_config, parallel=1), exe=server_exe) as doomed:
        engine = EndpointEngine(doomed.endpoint())
        gen = engine.chat(ASK, GenerationConfig(max_tokens=1000), extra={"ignore_eos": True, **FRESH})
        got = []
        with pytest.raises(EndpointError) as caught:
            for piece in gen:
                got.append(piece)
                if len(got) == 3:
                    doomed.kill()
        assert caught.value.kind in ("cut", "down") and len(got) >= 3 and gen.text == "".join(got)
        _one_line(caught.value)
        with pytest.raises(EndpointError) as after:
            engine.chat(ASK).run()
        assert after.value.kind == "down" and "start the server" in _one_line(after.value)
        engine.close()


def test_a_server_that_requires_an_api_key(server_exe, server_config):
    keyed = replace(server_config, parallel=1, api_key="s3cret")
    with LlamaServer(keyed, exe=server_exe) as server:
        for key in (None, "wrong"):
            with EndpointEngine(server.endpoint(api_key=key)) as engine:
                for call in (lambda e: e.chat(ASK, GenerationConfig(max_tokens=4)).run(), lambda e: e.models()):
                    with pytest.raises(EndpointError) as caught:
                        call(engine)
                    assert caught.value.kind == "auth" and caught.value.status == 401
                    assert "API key" in _one_line(caught.value)
        with EndpointEngine(server.endpoint()) as engine:
            assert engine.chat(ASK, GenerationConfig(max_tokens=4)).run().text
            assert engine.models() == [ALIAS]


def test_a_timeout_is_one_error_and_the_server_goes_on(server_exe, server_config):
    """Its own server: the abandoned request's prefill goes on there after the client gave up."""
    long_prompt = [{"role": "user", "content": "Summarise this: " + "the keeper climbed the stairs again. " * 80}]
    with LlamaServer(replace(server_config, parallel=1), exe=server_exe) as server:
        with EndpointEngine(server.endpoint(timeout_s=0.02)) as engine, pytest.raises(EndpointError) as caught:
            engine.chat(long_prompt, GenerationConfig(max_tokens=8), extra=FRESH).run()
        assert caught.value.kind == "timeout" and "raise timeout_s" in _one_line(caught.value), str(caught.value)
        with EndpointEngine(server.endpoint()) as engine:  # the abandoned request did not break the server
            assert engine.chat(ASK, GenerationConfig(max_tokens=4), extra=FRESH).run().text


def test_cancel_closes_the_stream_and_the_slot_is_freed(engine):
    cancel = threading.Event()
    gen = engine.chat(ASK, GenerationConfig(max_tokens=500), cancel=cancel, extra={"ignore_eos": True, **FRESH})
    for i, _ in enumerate(gen):
        if i == 2:
            cancel.set()
    assert gen.finish_reason == "cancelled" and gen.stats.steps == 3
    # both slots still answer (a slot left decoding 500 tokens would hold one of them)
    gens = engine.chat_many([ASK, ASK], GenerationConfig(max_tokens=4), extra=FRESH)
    assert all(g.text for g in gens)


def test_a_model_file_llama_server_cannot_load_is_one_line(server_exe, tmp_path, server_config):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\0" * 64)
    with pytest.raises(LlamaServerError) as caught:
        LlamaServer(replace(server_config, model=bad), exe=server_exe).start()
    assert "llama-server exited" in str(caught.value) and "\n" not in str(caught.value)
