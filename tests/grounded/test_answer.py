"""The answer modes over an Answerer, on a real index and the real bundled model: plain RAG
streaming, citations = the chunks stuffed into the prompt, no-index answers, Grounded through the
same API, one Speedup decoder per model, the registry, and the ``ask`` CLI.

Run: HF_HUB_OFFLINE=1 .venv/bin/python -m pytest tests/grounded/test_answer.py -q
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from localrag.answer import Answerer, RasdState, rag_messages
from localrag.config import GenerationConfig, GroundedConfig
from localrag.modes import MODES, AnswerRequest, get_mode, mode_names
from localrag.results import AnswerResult, RasdStats

pytestmark = pytest.mark.slow

GEN = GenerationConfig(max_tokens=24)
Q = "How many days of notice are needed to terminate the agreement?"


def _collect(stream):
    items = list(stream)
    assert items and isinstance(items[-1], AnswerResult)
    assert all(isinstance(x, str) for x in items[:-1])
    return "".join(items[:-1]), items[-1]


def test_plain_mode_streams_then_cites_the_stuffed_chunks(index, drafter):
    ans = Answerer(drafter, index)
    text, result = _collect(get_mode("plain").stream(ans, AnswerRequest(Q, gen=GEN, k=3)))
    assert result.mode == "plain" and result.supported and result.drafts == []
    assert result.text == text.strip() and text.strip()
    hits = index.search(Q, 3)
    assert [c.chunk_id for c in result.citations] == [h.chunk_id for h in hits]
    assert "contract.md" in result.citations[0].label
    system = rag_messages(Q, hits, [])[0]["content"]
    assert all(c.text.strip() in system for c in result.citations)
    assert 'collection "t"' in result.searched and "top 3" in result.searched
    st = result.stats
    assert st.mode == "plain" and st.retrieval.n_chunks == 3 and st.generation.decoder is None
    for value in (st.retrieval.seconds, st.generation.prefill_seconds, st.generation.decode_seconds, st.total_s):
        assert value >= 0


@pytest.mark.parametrize("mode", ["plain", "rasd"])
def test_a_cancelled_answer_keeps_its_text_sources_and_stats(index, drafter, mode):
    """Stop (the request's cancel flag) ends the answer early, and the mode still ends with its
    AnswerResult: the text written so far, the citations and the stats."""
    cancel = threading.Event()
    request = AnswerRequest(Q, gen=GenerationConfig(max_tokens=64), k=3, cancel=cancel)
    pieces, result = [], None
    for item in get_mode(mode).stream(Answerer(drafter, index), request):
        if isinstance(item, AnswerResult):
            result = item
        else:
            pieces.append(item)
            if len(pieces) == 2:
                cancel.set()
    assert result is not None and len(pieces) == 2
    assert result.text == "".join(pieces).strip() and result.text
    assert len(result.citations) == 3 and "contract.md" in result.citations[0].label
    gen = result.stats.generation
    assert gen.stop_reason == "cancelled" and 0 < gen.generated_tokens < 64 and gen.decode_seconds > 0


def test_history_is_kept_and_no_index_answers_without_documents(drafter):
    ans = Answerer(drafter, None)
    history = [{"role": "user", "content": "My name is Ada."}, {"role": "assistant", "content": "Hello Ada!"}]
    result = get_mode("plain").answer(ans, AnswerRequest("What is my name?", tuple(history), GEN))
    assert result.citations == [] and not result.supported
    assert "without documents" in result.searched and result.stats.retrieval.note == "no index"
    with pytest.raises(ValueError, match="unknown mode 'fast'; choose one of plain, rasd, grounded"):
        get_mode("fast")


def test_the_registry_names_every_mode_once():
    assert list(MODES) == ["plain", "rasd", "grounded"]
    assert mode_names() == ["plain", "rasd", "grounded", "speedup", "specrag"]
    assert get_mode("specrag") is MODES["grounded"] and get_mode("speedup") is MODES["rasd"]
    assert [m.label for m in MODES.values()] == ["Plain", "Speedup (RASD)", "Grounded (Speculative RAG)"]


def test_grounded_mode_through_the_answerer(index, drafter, verifier):
    ans = Answerer(drafter, index, verifier=verifier,
                   grounded_config=GroundedConfig(m=2, answer_tokens=8, rationale_tokens=16))
    text, result = _collect(get_mode("specrag").stream(ans, AnswerRequest(Q, gen=GEN)))
    assert result.mode == "grounded" and text == result.text and len(result.drafts) >= 1
    assert result.supported == bool(result.citations)
    assert result.stats.grounded.n_drafts == len(result.drafts) and result.stats.generation is None


def test_one_rasd_decoder_serves_every_answerer_of_a_model(index, drafter):
    """Fresh Answerers sharing one RasdState (as the UI makes them, one per message) reuse ONE
    decoder, so what it learned carries over, and its datastore follows each question's chunks.
    Losslessness itself is tested on the decoder (tests/rasd/test_rasd_models.py)."""
    state = RasdState()
    decoders = []
    for question, quote in ((Q, " terminate this agreement with 30 days written notice"),
                            ("When does the blue ferry leave for the island?", " The blue ferry Aurora leaves")):
        result = get_mode("rasd").answer(Answerer(drafter, index, rasd_state=state),
                                         AnswerRequest(question, gen=GEN, k=2))
        assert result.text and isinstance(result.stats.generation.decoder, RasdStats)
        decoder = state.decoder
        decoders.append(decoder)
        assert decoder.stats.tokens > 0 and result.stats.generation.decoder is decoder.stats
        assert decoder.datastore._corpus.count(drafter.backend.tokenize(quote, add_special=False)) >= 1
    assert decoders[0] is decoders[1]


def test_ask_cli_json(index, corpus):
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    out = subprocess.run([sys.executable, "-m", "localrag", "ask", Q, "--mode", "plain", "--collection", "t",
                          "--index-dir", str(index.config.index_dir), "--k", "2", "--max-tokens", "12",
                          "--threads", "2", "--json"], capture_output=True, text=True, env=env, timeout=240)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["mode"] == "plain" and len(data["citations"]) == 2
    assert data["citations"][0]["label"].startswith("contract.md")
