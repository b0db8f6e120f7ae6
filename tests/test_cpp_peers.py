"""``bench speed``'s C++ peers run for real: llama.cpp's llama-speculative-simple (draft model,
and n-gram lookup in front of it) and llama-lookup, on the Qwen 0.5B drafting for itself.

A model drafting for itself proposes what the target would say, so the drafts are accepted
almost whole: a check that the draft model is really loaded and used, and that the program's
answer (its own greedy decoding) is ours. The programs are built on demand like llama-server's
tests (one build makes all of them; minutes the first time). These live outside tests/rasd,
whose private cache folder would build them a second time.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from localrag.bench.speed_peer import CppPeers, PeerUnavailable, peer_tools
from localrag.config import GenerationConfig, ModelConfig
from localrag.engine import Engine
from localrag.generation import Generation, PlainDecoder
from tests.conftest import require_or_skip

pytestmark = pytest.mark.slow

MODEL = "qwen2.5-coder-0.5b-instruct"
DOC = "The ferry to Lind Island leaves from pier 14 at 7:40 every weekday morning, and from pier 9 at weekends."
CFG = GenerationConfig(max_tokens=24, repetition=None)


@pytest.fixture(scope="module")
def peers():
    try:
        tools = peer_tools()
    except PeerUnavailable as exc:
        require_or_skip(str(exc))
    engine = Engine.load(ModelConfig(model=MODEL, n_ctx=2048))
    yield CppPeers(tools, engine, n_ctx=2048, draft_model=Path(engine.backend.model_spec.path))
    engine.close()


@pytest.fixture(scope="module")
def prompt(peers):
    """(rendered text, ids, config, our plain greedy answer) of a copy-friendly chat prompt."""
    engine = peers.engine
    text = engine.prompt.render([{"role": "user", "content": f"Repeat this sentence word for word: {DOC}"}])
    ids = engine.encode_prompt(text)
    cfg = CFG.with_(stop=engine.prompt.stop)
    engine.backend.reset()
    answer = Generation(engine.backend, ids, PlainDecoder(), cfg).run()
    return text, ids, cfg, engine.backend.detokenize(list(answer.tokens))


@pytest.mark.parametrize("method", ["llama-speculative-d4", "llama-speculative-ngram-d4"])
def test_draft_model_speculation_answers_as_plain_and_accepts_its_own_drafts(peers, prompt, method):
    text, ids, cfg, plain_text = prompt
    assert "pier 14" in plain_text
    run = peers.run(method, text, ids, cfg, plain_text)
    assert run.identical, "llama.cpp's greedy answer differs from ours"
    assert run.n >= cfg.max_tokens - 1 and run.decode_s > 0
    stats = run.stats
    assert stats["n_draft"] == 4 and stats["n_drafted"] > 0
    # a model drafting for itself: most drafts accepted, so several tokens per target forward
    assert stats["mean_accepted"] > 2.5, stats


def test_lookup_runs_on_the_same_prompt(peers, prompt):
    text, ids, cfg, plain_text = prompt
    run = peers.run("llama-lookup", text, ids, cfg, plain_text)
    assert run.identical and run.stats["n_draft"] == 3


def test_a_speculative_peer_without_a_draft_model_is_refused(peers, prompt):
    text, ids, cfg, plain_text = prompt
    no_draft = CppPeers(peers.tools, peers.engine, n_ctx=2048)
    with pytest.raises(ValueError, match="needs a draft model"):
        no_draft.run("llama-speculative", text, ids, cfg, plain_text)
