"""The answer modes over an Answerer, on a real index and the real bundled model: plain RAG
streaming, citations computed from the answer's evidence (the rest of the prompt's chunks listed
as also searched), no-index answers, honest refusal, Grounded through the same API, one Speedup
decoder per model, the registry, and the ``ask`` CLI.

Run: HF_HUB_OFFLINE=1 .venv/bin/python -m pytest tests/grounded/test_answer.py -q
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from localrag.answer import AnswerConfig, Answerer, ModelHub, rag_messages
from localrag.config import GenerationConfig, GroundedConfig
from localrag.grounded.extras import GroundedExtras
from localrag.modes import MODES, AnswerRequest, get_mode
from localrag.results import AnswerProgress, AnswerResult, RasdStats

pytestmark = pytest.mark.slow

GEN = GenerationConfig(max_tokens=24)
Q = "How many days of notice are needed to terminate the agreement?"


def ask(mode: str, question: str = Q, history=(), gen: GenerationConfig = GEN, **options) -> AnswerRequest:
    return AnswerRequest(question, tuple(history), gen, options=get_mode(mode).options(options))


def _collect(stream, progress: list | None = None):
    items = list(stream)
    assert items and isinstance(items[-1], AnswerResult)
    steps = [x for x in items[:-1] if isinstance(x, AnswerProgress)]
    text = [x for x in items[:-1] if not isinstance(x, AnswerProgress)]
    assert all(isinstance(x, str) for x in text)
    if progress is not None:
        progress += steps
    else:
        assert not steps
    return "".join(text), items[-1]


def test_plain_mode_streams_then_cites_what_supports_the_answer(index, drafter):
    ans = Answerer(drafter, index)
    text, result = _collect(get_mode("plain").stream(ans, ask("plain", k=3)))
    assert result.mode == "plain" and result.extras is None
    assert result.text == text.strip() and text.strip()
    hits = index.search(Q, 3)
    ev = result.evidence
    # checked against its prompt's chunks, with the model's confidence in what it wrote
    confidence = result.stats.generation.mean_logprob
    assert confidence is not None and confidence < 0.0
    assert ev == ans.evidence_aligner().align(result.text, hits, question=Q, confidence=confidence)
    assert result.supported == ev.supported and result.on_unsupported == "warn" and not result.refused
    assert [c.chunk_id for c in result.citations] == list(ev.cited)  # (none when nothing of it was found)
    assert [c.chunk_id for c in result.also_searched] == [h.chunk_id for h in hits if h.chunk_id not in ev.cited]
    assert "contract.md" in (result.citations + result.also_searched)[0].label
    system = rag_messages(Q, hits, [])[0]["content"]
    assert all(c.text.strip() in system for c in result.citations + result.also_searched)
    assert 'collection "t"' in result.searched and "top 3" in result.searched
    st = result.stats
    assert st.mode == "plain" and st.search.n_chunks == 3 and st.generation.decoder is None
    phases = (st.search.seconds, st.generation.prefill_seconds, st.generation.decode_seconds)
    assert all(s > 0 for s in phases) and sum(phases) <= st.total_s, (phases, st.total_s)  # timed, within the answer


@pytest.mark.parametrize("mode", ["plain", "speedup"])
def test_a_cancelled_answer_keeps_its_text_sources_and_stats(index, drafter, mode):
    """Stop (the request's cancel flag) ends the answer early, and the mode still ends with its
    AnswerResult: the text written so far, the citations and the stats."""
    cancel = threading.Event()
    request = AnswerRequest(Q, gen=GenerationConfig(max_tokens=64), cancel=cancel,
                            options=get_mode(mode).options({"k": 3}))
    pieces, result = [], None
    for item in get_mode(mode).stream(Answerer(drafter, index), request):
        if isinstance(item, AnswerResult):
            result = item
        elif isinstance(item, str):  # (progress before the text: reading, Speedup's first cost curves)
            pieces.append(item)
            if len(pieces) == 2:
                cancel.set()
    assert result is not None and len(pieces) == 2
    assert result.text == "".join(pieces).strip() and result.text
    assert len(result.citations + result.also_searched) == 3 and result.evidence is not None
    gen = result.stats.generation
    assert gen.stop_reason == "cancelled" and 0 < gen.generated_tokens < 64 and gen.decode_seconds > 0


def test_history_is_kept_and_no_index_answers_without_documents(drafter):
    ans = Answerer(drafter, None)
    history = [{"role": "user", "content": "My name is Ada."}, {"role": "assistant", "content": "Hello Ada!"}]
    result = get_mode("plain").answer(ans, AnswerRequest("What is my name?", tuple(history), GEN))
    assert result.citations == [] and not result.supported and not result.refused  # warned, not refused
    assert "without documents" in result.searched and result.stats.search.note == "no index"
    with pytest.raises(ValueError, match="unknown mode 'fast'; choose one of plain, speedup, grounded"):
        get_mode("fast")


def test_the_registry_names_every_mode_once():
    assert list(MODES) == ["plain", "speedup", "grounded"]
    # the old spellings, as stored chats and old clients send them
    assert get_mode("specrag") is MODES["grounded"] and get_mode("rasd") is MODES["speedup"]
    assert [m.label for m in MODES.values()] == ["Plain", "Speedup (RASD)", "Grounded (Speculative RAG)"]


def test_grounded_mode_streams_its_progress_then_the_checked_answer(index, drafter, verifier):
    """Grounded: progress while it searches, drafts (k of m) and verifies; then the answer model's own
    answer over the chunks, streamed as it is written; then the result: a candidate the documents
    support (the streamed answer, or a draft), or a refusal marking none."""
    models = ModelHub(drafter, load_engine=lambda cfg: verifier)  # the verifier by name: the loaded Gemma
    ans = Answerer(drafter, index, models, AnswerConfig(grounded=GroundedConfig(rationale_tokens=16)))
    items = list(get_mode("specrag").stream(ans, ask("grounded", drafts=2, drafter="target", verifier="gemma3-270m")))
    result = items[-1]
    assert isinstance(result, AnswerResult)
    pieces = [i for i, x in enumerate(items[:-1]) if isinstance(x, str)]
    progress = [x for x in items[:-1] if isinstance(x, AnswerProgress)]
    assert pieces and all(isinstance(x, AnswerProgress) for x in items[:pieces[0]])  # all progress first
    extras = result.extras
    assert isinstance(extras, GroundedExtras) and extras.scoring == "drafter + reflection"
    assert result.mode == "grounded" and result.on_unsupported == "refuse"
    own, drafts = extras.drafts[0], extras.drafts[1:]
    assert own.origin == "answer model" and drafts and {d.origin for d in drafts} == {"drafter"}
    assert "".join(items[i] for i in pieces).strip() == own.answer  # the answer model's answer, streamed
    assert extras.n_drafts == len(extras.drafts) and result.stats.generation.generated_tokens > 0
    assert result.refused == (not result.supported)
    if result.supported:
        chosen = extras.drafts[extras.chosen()]
        assert result.text == chosen.text and not chosen.check
        assert result.evidence is not None and [c.chunk_id for c in result.citations] == list(result.evidence.cited)
    else:
        assert extras.chosen() is None and extras.unsupported_reason
    # searching, drafting 0 of m .. m of m (as drafts finish), verifying: before the answer is written
    m = len(drafts)
    assert progress[0].stage == "searching"
    verifying = next(i for i, p in enumerate(progress) if p.stage == "verifying")
    drafting = [(p.done, p.total) for p in progress[1:verifying]]
    assert drafting[0] == (0, m) and drafting[-1] == (m, m) and {p.stage for p in progress[1:verifying]} == {"drafting"}
    assert [d for d, _ in drafting] == sorted({d for d, _ in drafting})
    assert progress[1].message == f"Drafting answers: 0 of {m} done…"


IBUPROFEN = "What is the recommended dosage of ibuprofen for adults?"


def test_an_answer_the_documents_do_not_support_is_refused_when_asked(index, drafter):
    """Nothing about ibuprofen is in the documents: the answer is found in none of its chunks, so
    Plain warns by default and, asked to refuse, says so with what was searched, keeping the text."""
    ans = Answerer(drafter, index)
    warned = get_mode("plain").answer(ans, ask("plain", IBUPROFEN, k=2))
    assert warned.text and not warned.supported and not warned.refused and warned.citations == []
    assert [s.supported for s in warned.evidence.sentences] == [False] * len(warned.evidence.sentences)
    refused = get_mode("plain").answer(ans, ask("plain", IBUPROFEN, k=2, on_unsupported="refuse"))
    assert refused.text == warned.text and refused.refused
    assert refused.refusal.startswith("Your documents do not support an answer to this question")
    assert refused.refusal.endswith(f"What was searched: {refused.searched}")
    with pytest.raises(ValueError, match="on_unsupported must be one of warn, refuse"):
        get_mode("plain").options({"on_unsupported": "ignore"})


def test_one_rasd_decoder_serves_every_answer_of_a_model(index, drafter):
    """Every answer of one Answerer (one per loaded model, as the app keeps it) reuses ONE Speedup
    decoder per draft choice, so what it learned carries over, and its datastore follows each
    question's chunks. Losslessness itself is tested on the decoder (tests/rasd/test_rasd_models.py)."""
    answerer = Answerer(drafter, index)
    decoders = []
    for question, quote in ((Q, " terminate this agreement with 30 days written notice"),
                            ("When does the blue ferry leave for the island?", " The blue ferry Aurora leaves")):
        result = get_mode("rasd").answer(answerer, ask("speedup", question, k=2))
        assert result.text and isinstance(result.stats.generation.decoder, RasdStats)
        [decoder] = [r for key, r in answerer._runtimes.items() if key[0] == "speedup"]
        decoders.append(decoder)
        assert decoder.stats.tokens > 0 and result.stats.generation.decoder is decoder.stats
        assert decoder.datastore._corpus.count(drafter.backend.tokenize(quote, add_special=False)) >= 1
    assert decoders[0] is decoders[1]


def test_ask_cli_json(index, corpus):
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    out = subprocess.run([sys.executable, "-m", "localrag", "ask", Q, "--mode", "plain", "--collection", "t",
                          "--index-dir", str(index.config.index_dir), "--k", "2", "--max-tokens", "12", "--model", "smollm2-135m-instruct",
                          "--threads", "2", "--json"], capture_output=True, text=True, env=env, timeout=240)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["mode"] == "plain" and len(data["citations"] + data["also_searched"]) == 2
    # what is cited is what the evidence found the answer in, the rest was searched; which chunks
    # those are depends on what the 135M model wrote, which differs between llama.cpp builds (the
    # CPU's instruction sets): the retrieval order does not
    assert [c["chunk_id"] for c in data["citations"]] == data["evidence"]["cited"]
    assert [c["chunk_id"] for c in data["also_searched"]] == data["evidence"]["also_searched"]
    hits = index.search(Q, 2)
    assert {c["chunk_id"] for c in data["citations"] + data["also_searched"]} == {h.chunk_id for h in hits}
    assert hits[0].citation().startswith("contract.md")
    sentences = data["evidence"]["sentences"]
    assert sentences and all(isinstance(s["supported"], bool) and "spans" in s for s in sentences)


def test_ask_cli_marks_and_refuses(index, corpus):
    """The printed answer carries [n] after its supported sentences; an unsupported one is named on
    stderr; --on-unsupported refuse prints the refusal on stdout and the answer, labelled, on stderr;
    --json has "supported": false on the sentences found nowhere."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    base = [sys.executable, "-m", "localrag", "ask", "--mode", "plain", "--collection", "t", "--index-dir",
            str(index.config.index_dir), "--k", "2", "--max-tokens", "24", "--threads", "2",
            "--model", "smollm2-135m-instruct"]
    out = subprocess.run(base + [IBUPROFEN, "--on-unsupported", "refuse", "--json"], capture_output=True,
                         text=True, env=env, timeout=240)
    data = json.loads(out.stdout)
    supported = [s["supported"] for s in data["evidence"]["sentences"]]
    assert data["refused"] and supported and not any(supported), supported  # its every sentence found nowhere
    out = subprocess.run(base + [IBUPROFEN, "--on-unsupported", "refuse"], capture_output=True, text=True, env=env,
                         timeout=240)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("Your documents do not support an answer to this question")
    assert f"Unsupported answer (not found in your documents):\n{data['text']}" in out.stderr
    assert (out.stdout + out.stderr).count(data["searched"]) == 1  # the refusal says it; stderr does not repeat it
    out = subprocess.run(base + ["When does the blue ferry leave for the island?"], capture_output=True, text=True,
                         env=env, timeout=240)
    assert re.search(r"\.\[1\]", out.stdout), out.stdout
    assert re.search(r"\[1\] boat\.txt lines 1-2: “[^”]*ferry Aurora leaves", out.stderr), out.stderr
