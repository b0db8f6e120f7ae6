"""The app answering through a real llama-server (tests/endpoint/conftest.py, the bundled SmolLM2 on
loopback): Plain and Grounded over a collection, streamed, with the evidence check, citations and
refusal as in-process; Speedup saying it runs in-process only; and the API and the page on top,
with a server killed mid-answer, a wrong model name and a server that requires an API key: a
clear message, a 502 or 504 with it, never a traceback.

Run: .venv/bin/python -m pytest tests/endpoint -q -m slow   (the first run builds llama-server)
"""

from __future__ import annotations

import re
import threading
from dataclasses import replace

import pytest
from fastapi.testclient import TestClient

from localrag.answer import Answerer
from localrag.app.config import AppConfig
from localrag.app.services import Services, open_engine
from localrag.backends.endpoint import EndpointEngine, EndpointError
from localrag.backends.llama_server import LlamaServer
from localrag.config import GenerationConfig, GroundedConfig
from localrag.grounded.extras import GroundedExtras
from localrag.grounded.pipeline import GroundedPipeline
from localrag.grounded.remote import RemoteGroundedPipeline
from localrag.modes import AnswerRequest, get_mode
from localrag.rag.config import IndexConfig
from localrag.rag.index import DocumentIndex
from localrag.ui.handlers import ChatController
from localrag.ui.settings import Settings
from tests.sample_docs import write_sample_docs

ALIAS = "smollm2"
pytestmark = pytest.mark.slow
GEN = GenerationConfig(max_tokens=32)
Q = "Who polished the mirror of the Zephyr telescope?"


@pytest.fixture(scope="module")
def docs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("endpoint-docs")
    index = DocumentIndex(IndexConfig(index_dir=tmp / "index"))
    assert index.ingest([write_sample_docs(tmp / "docs")]).added == 2
    yield index
    index.close()


def _ask(mode: str, question: str = Q, **options) -> AnswerRequest:
    return AnswerRequest(question, gen=GEN, options=get_mode(mode).options({"k": 2, **options}))


def test_plain_through_the_endpoint_is_checked_and_cited_as_in_process(engine, docs):
    answerer = Answerer(engine, docs)
    assert answerer.remote
    items = list(get_mode("plain").stream(answerer, _ask("plain")))
    result, pieces = items[-1], items[:-1]
    assert len(pieces) > 1 and result.text == "".join(pieces).strip()  # streamed
    assert result.evidence is not None and [c.chunk_id for c in result.citations] == list(result.evidence.cited)
    assert len(result.citations + result.also_searched) == 2 and 'collection "default"' in result.searched
    assert result.stats.generation.generated_tokens > 0 and result.stats.generation.decode_tps > 0
    # no hidden state comes back from a server: the answer names the judge it had instead
    assert result.stats.judge.judge == "evidence check only (the answer model runs on a serving engine)"


def test_speedup_says_it_runs_in_process_only(engine):
    ok, why = get_mode("speedup").available(Answerer(engine))
    assert not ok and "in this process only" in why and "server's own" in why


def test_grounded_sends_its_drafts_together_and_says_how_it_scored_them(engine, docs):
    answerer = Answerer(engine, docs)
    items = list(get_mode("grounded").stream(answerer, _ask("grounded", n=2, clusters=1, drafts=2)))
    result = items[-1]
    progress = [p.stage for p in items[:-1] if not isinstance(p, str)]
    assert progress[0] == "searching" and "drafting" in progress
    assert progress.index("drafting") < progress.index("verifying")
    extras = result.extras
    # the server's own answer over the chunks, then one draft per subset: one chunk of each (one)
    # cluster from the relevant ones of the top 2
    own, drafts = extras.drafts[0], extras.drafts[1:]
    assert isinstance(extras, GroundedExtras) and own.origin == "answer model" and 1 <= len(drafts) <= 2
    assert extras.scoring == "drafter + reflection"
    kept = [d for d in drafts if not d.dropped]
    assert kept and all(d.draft_logprob < 0 and d.n_draft_tokens > 0 and d.reflection < 0 for d in kept)
    assert result.on_unsupported == "refuse" and (result.refused or result.evidence is not None)


WORKED = ("\n\nFor example:\nDocuments:\n[1] The lighthouse on Kell Point was painted by Ilse Marrow in 1932.\n\n"
          "Question: Who painted the lighthouse on Kell Point?\nRationale: The lighthouse on Kell Point was painted "
          "by Ilse Marrow in 1932.\nAnswer: Ilse Marrow")


def test_grounded_through_the_server_writes_its_drafts_as_in_process(engine, docs, smollm2_engine):
    """The server's drafts are cut by the in-process drafter's rules (tests/grounded/test_remote_drafts.py):
    the same subsets, the same rationale (continued from "Rationale:", ended at its sentence), and an
    answer of one sentence that ends within its limit. (A free reply ran on into answers of several
    sentences, dropped at their limit: F1 2.0 against 8.7 in-process on 40 SQuAD questions.)"""
    # SmolLM2 writes a rationale of its own only when shown one (the app's prompt shows none): this
    # test is about how both cut what was written, so its prompt shows one
    cfg = GroundedConfig(n=2, k=1, m=2, drafter_prompt=GroundedConfig().drafter_prompt + WORKED)
    remote = RemoteGroundedPipeline(engine, cfg).answer(Q, docs, GEN).extras.drafts
    local = GroundedPipeline(smollm2_engine, smollm2_engine, cfg).answer(Q, docs, GEN).extras.drafts
    assert remote and [d.subset for d in remote] == [d.subset for d in local]
    for r, lo in zip(remote, local, strict=True):
        assert r.rationale == lo.rationale and "Answer" not in r.rationale
        assert not r.dropped and not lo.dropped and "\n" not in r.answer
        assert not re.search(r"[.!?]\s+\w", r.answer)  # one sentence: it ends at its first sentence end
        assert "Marta Ilves" in r.answer and "Marta Ilves" in lo.answer


def test_a_wrong_model_name_and_a_server_that_wants_a_key_are_clear(server, server_exe, server_config, tmp_path):
    wrong = AppConfig(endpoint=replace(server.endpoint(), model="no-such-model"))
    with pytest.raises(EndpointError) as caught:
        open_engine(wrong)
    assert caught.value.kind == "model" and ALIAS in str(caught.value) and "\n" not in str(caught.value)
    locked_cfg = replace(server_config, api_key="s3cret", port=0)
    with LlamaServer(locked_cfg, exe=server_exe) as locked:
        with pytest.raises(EndpointError) as refused:
            open_engine(AppConfig(endpoint=replace(locked.endpoint(), api_key=None)))
        assert refused.value.kind == "auth"
        engine = open_engine(AppConfig(endpoint=locked.endpoint()))  # with the key it works
        try:
            assert engine.chat([{"role": "user", "content": "Hi"}], GEN).run().text
        finally:
            engine.close()


def test_the_api_and_the_page_answer_through_it_and_a_killed_server_is_a_message(server_exe, server_config,
                                                                                  tmp_path, docs):
    with LlamaServer(replace(server_config, port=0), exe=server_exe) as own:
        cfg = AppConfig(data_dir=tmp_path / "data", index=docs.config, endpoint=own.endpoint())
        services = Services(cfg, engine=open_engine(cfg), index_factory=lambda name: docs)
        try:
            client = TestClient(__import__("localrag.api.app", fromlist=["create_app"]).create_app(services))
            body = {"model": ALIAS, "collection": "default", "k": 2, "messages": [{"role": "user", "content": Q}]}
            reply = client.post("/v1/chat/completions", json=body)
            assert reply.status_code == 200, reply.text
            assert reply.json()["localrag"]["citations"] is not None
            speedup = client.post("/v1/chat/completions", json={**body, "mode": "speedup"})
            assert speedup.status_code == 400 and "in this process only" in speedup.json()["error"]["message"]
            view = list(ChatController(services).respond(None, Q, Settings(k=2, max_tokens=24)))[-1]
            shown = view.messages[1]["content"]
            assert "what was searched" in shown.lower() and "serving engine" not in shown and "Traceback" not in shown
            # the server dies in the middle of an answer
            long = {**body, "max_tokens": 400, "stream": True,
                    "messages": [{"role": "user", "content": "Write a long story about a lighthouse."}]}
            del long["collection"]
            killer = threading.Timer(1.5, own.kill)
            killer.start()
            streamed = client.post("/v1/chat/completions", json=long)
            killer.join()
            text = streamed.text
            assert "Traceback" not in text and ("the serving engine failed" in text or streamed.status_code == 502)
            down = client.post("/v1/chat/completions", json=body)  # and now it is down
            assert down.status_code == 502 and "the serving engine failed" in down.json()["error"]["message"]
            view = list(ChatController(services).respond(None, Q, Settings(k=2, max_tokens=24)))[-1]
            shown = view.messages[1]["content"]
            assert "EndpointError" in shown or "cannot be reached" in shown or "refused" in shown
            assert "Traceback" not in shown
        finally:
            services.answerer = None  # the endpoint engine is closed by its server's end
            services.close()


def test_the_endpoint_engine_is_named_like_an_engine(engine):
    assert isinstance(engine, EndpointEngine) and engine.model_name == ALIAS and ALIAS in engine.label
