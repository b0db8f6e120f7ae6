"""Follow-up questions search with the conversation (``localrag.rag.followup``): the rewriting itself,
and every way in (the answer modes the UI and API run, the UI's chat, ``search --history`` and
``ask --history``) on a real index with the real embedder and the bundled model.

The corpus is two small documents where the follow-up "How often does that happen?" alone finds the
garden notes ("Watering happens every ...") and, asked after a question about the Zephyr telescope,
must find the telescope's document ("... observes the sky ... every clear night").

Run: .venv/bin/python -m pytest tests/test_followup.py -q
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from localrag.answer import Answerer
from localrag.app.config import AppConfig
from localrag.app.services import Services
from localrag.bench.data import HotpotQuestion
from localrag.bench.followup import make_case
from localrag.config import GenerationConfig
from localrag.modes import AnswerRequest, get_mode
from localrag.rag import DocumentIndex, IndexConfig
from localrag.rag.followup import FollowupConfig, HistoryError, key_terms, parse_history, search_query
from localrag.ui.handlers import ChatController
from localrag.ui.settings import Settings
from tests.sample_docs import write_sample_docs

ROOT = Path(__file__).resolve().parents[1]
FIRST = "Where does the Zephyr telescope observe the sky from?"
FOLLOWUP = "How often does that happen?"
HISTORY = ({"role": "user", "content": FIRST}, {"role": "assistant", "content": "From the Quillfield ridge."})
SHORT = GenerationConfig(max_tokens=8)


# ------------------------------------------------------------------ the rewriting
def test_a_follow_up_gets_the_earlier_questions_key_terms():
    assert search_query("When was it founded?", [{"role": "user", "content": "Tell me about the Acme Corporation."},
                                                 {"role": "assistant", "content": "Acme makes rockets."}]) \
        == "When was it founded? Acme Corporation"  # question words and stopwords dropped; the answer not read
    assert search_query(FOLLOWUP, HISTORY) == f"{FOLLOWUP} Zephyr telescope observe sky"
    # a term the question already has (by stem) is not added again
    assert search_query("Which telescopes observe comets?", HISTORY) == "Which telescopes observe comets? Zephyr sky"


def test_a_question_without_earlier_user_turns_is_searched_unchanged():
    assert search_query(FOLLOWUP, []) == FOLLOWUP
    assert search_query(FOLLOWUP, [{"role": "assistant", "content": "Hello! Ask me about your documents."},
                                   {"role": "system", "content": "Be brief."}]) == FOLLOWUP
    assert search_query(FOLLOWUP, HISTORY, FollowupConfig(turns=0)) == FOLLOWUP


def test_turns_and_max_terms_bound_what_is_added():
    history = [{"role": "user", "content": "Tell me about the Brindle cooperative."},
               {"role": "user", "content": "Where is the Harbor rowing club?"}]
    assert search_query("When was it founded?", history) == "When was it founded? Harbor rowing club"
    assert search_query("When was it founded?", history, FollowupConfig(turns=2)) \
        == "When was it founded? Harbor rowing club Brindle cooperative"  # the most recent first
    assert search_query("When was it founded?", history, FollowupConfig(max_terms=1)) == "When was it founded? Harbor"
    assert key_terms("Rowing clubs: who rows in a club?") == ["Rowing", "clubs"]  # once per stem
    with pytest.raises(ValueError):
        FollowupConfig(turns=-1)


@pytest.mark.parametrize("data, says", [
    ({"role": "user"}, "JSON list"),
    (["hi"], "turn 0"),
    ([{"role": "user", "content": "a"}, {"role": "bot", "content": "b"}], "turn 1"),
    ([{"role": "user", "content": 3}], "turn 0"),
])
def test_a_malformed_history_is_one_clear_error(data, says):
    with pytest.raises(HistoryError, match=says):
        parse_history(data)


# ------------------------------------------------------------------ a real index
@pytest.fixture(scope="module")
def docs_dir(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("followup")
    src = write_sample_docs(tmp / "docs")
    index = DocumentIndex(IndexConfig(index_dir=tmp / "index", collection="docs"))
    assert index.ingest([src]).added == 2
    index.close()
    return tmp


@pytest.fixture(scope="module")
def index(docs_dir):
    idx = DocumentIndex(IndexConfig(index_dir=docs_dir / "index", collection="docs"))
    yield idx
    idx.close()


def names(chunks) -> list[str]:
    return [Path(c.file).name for c in chunks]


@pytest.mark.slow
def test_the_corpus_needs_the_conversation(index):
    """The premise of the tests below: the follow-up alone finds the garden, rewritten the telescope."""
    assert names(index.search(FOLLOWUP, 1)) == ["garden.txt"]
    assert names(index.search(search_query(FOLLOWUP, HISTORY), 1)) == ["zephyr.md"]


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["plain", "speedup"])
def test_the_modes_search_a_follow_up_with_the_conversation(smollm2_engine, index, mode):
    """What the UI and the API run: the mode, given the earlier turns, searches with their key terms
    (and a question without history is searched as asked)."""
    answerer = Answerer(smollm2_engine, index)
    k1 = get_mode(mode).options({"k": 1})
    alone = get_mode(mode).answer(answerer, AnswerRequest(FOLLOWUP, gen=SHORT, options=k1))
    followed = get_mode(mode).answer(answerer, AnswerRequest(FOLLOWUP, HISTORY, gen=SHORT, options=k1))
    assert names(alone.citations + alone.also_searched) == ["garden.txt"]
    assert f'searched "{FOLLOWUP}" in' in alone.searched
    assert names(followed.citations + followed.also_searched) == ["zephyr.md"]
    assert f'searched "{FOLLOWUP} Zephyr telescope observe sky" in' in followed.searched


@pytest.mark.slow
def test_grounded_mode_searches_a_follow_up_with_the_conversation(smollm2_engine, index):
    answerer = Answerer(smollm2_engine, index)
    one = get_mode("grounded").options({"n": 1, "clusters": 1, "drafts": 1, "drafter": "target"})
    result = get_mode("grounded").answer(answerer, AnswerRequest(FOLLOWUP, HISTORY, gen=SHORT, options=one))
    assert result.stats.search.query == f"{FOLLOWUP} Zephyr telescope observe sky"
    assert f'searched "{FOLLOWUP} Zephyr telescope observe sky" in' in result.searched


@pytest.mark.slow
def test_a_follow_up_in_the_ui_chat_retrieves_the_earlier_topic(smollm2_engine, docs_dir, tmp_path):
    services = Services(AppConfig(data_dir=tmp_path / "data", index=IndexConfig(index_dir=docs_dir / "index")),
                        engine=smollm2_engine)
    chat = ChatController(services)
    settings = Settings(collection="docs", k=1, max_tokens=8)
    alone_id = list(chat.respond(None, FOLLOWUP, settings))[-1].chat_id
    chat_id = list(chat.respond(None, FIRST, settings))[-1].chat_id
    list(chat.respond(chat_id, FOLLOWUP, settings))
    alone, = services.history.turns(alone_id)
    first, followed = services.history.turns(chat_id)
    assert names(alone.citations + alone.also_searched) == ["garden.txt"]
    assert names(followed.citations + followed.also_searched) == ["zephyr.md"]
    assert "Zephyr telescope observe sky" in followed.searched


# ------------------------------------------------------------------ the command line
def localrag(*args: str, home: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, HOME=str(home), PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1", ANONYMIZED_TELEMETRY="False")
    return subprocess.run([sys.executable, "-m", "localrag", *args], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=300)


@pytest.mark.slow
def test_search_with_history_searches_as_the_app_does(docs_dir, tmp_path):
    history = tmp_path / "chat.json"
    history.write_text(json.dumps(list(HISTORY)))
    where = ["--index-dir", str(docs_dir / "index"), "--collection", "docs", "--k", "1", "--json"]
    alone = localrag("search", FOLLOWUP, *where, home=tmp_path)
    followed = localrag("search", FOLLOWUP, "--history", str(history), *where, home=tmp_path)
    assert alone.returncode == 0 and followed.returncode == 0, alone.stderr + followed.stderr
    assert [Path(h["file"]).name for h in json.loads(alone.stdout)] == ["garden.txt"]
    assert [Path(h["file"]).name for h in json.loads(followed.stdout)] == ["zephyr.md"]
    assert f'searched: "{FOLLOWUP} Zephyr telescope observe sky"' in followed.stderr


@pytest.mark.slow
@pytest.mark.parametrize("content, says", [
    ("not json", "is not JSON"),
    ('{"role": "user", "content": "hi"}', "must be a JSON list"),
    (None, "cannot read the history file"),
])
def test_search_with_a_bad_history_file_is_one_error_line(docs_dir, tmp_path, content, says):
    history = tmp_path / "chat.json"
    if content is not None:
        history.write_text(content)
    out = localrag("search", FOLLOWUP, "--history", str(history), "--index-dir", str(docs_dir / "index"),
                   home=tmp_path)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.startswith("error: ") and says in out.stderr and len(out.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_ask_with_history_follows_up(docs_dir, tmp_path):
    history = tmp_path / "chat.json"
    history.write_text(json.dumps(list(HISTORY)))
    out = localrag("ask", FOLLOWUP, "--history", str(history), "--index-dir", str(docs_dir / "index"),
                   "--collection", "docs", "--k", "1", "--max-tokens", "8", "--json", home=tmp_path)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert f'searched "{FOLLOWUP} Zephyr telescope observe sky" in' in result["searched"]
    assert [Path(c["file"]).name for c in result["citations"] + result["also_searched"]] == ["zephyr.md"]
    bad = localrag("ask", FOLLOWUP, "--history", str(tmp_path / "missing.json"), home=tmp_path)
    assert bad.returncode == 2 and bad.stderr.startswith("error: cannot read the history file")


# ------------------------------------------------------------------ the benchmark's conversations
def test_bench_followup_turns_a_bridge_question_into_two_turns():
    record = {  # as the wheel's hotpotqa.json holds it
        "type": "bridge", "question": "The English actor Kris Marshall played which character in Death in Paradise?",
        "answer": "DI Goodman",
        "supporting_facts": [["Kris Marshall", 0], ["Death in Paradise (TV series)", 1]],
        "context": [["Kris Marshall", ["Kris Marshall is an English actor. ", "He was born in Bristol."]],
                    ["Garden (film)", ["A film."]],
                    ["Death in Paradise (TV series)", ["A crime drama. ", "Marshall played DI Goodman."]]],
    }
    case = make_case(HotpotQuestion.from_json(record))
    assert case.history == ({"role": "user", "content": "Tell me about Kris Marshall."},
                            {"role": "assistant", "content": "Kris Marshall is an English actor."})
    assert case.followup == "The English actor it played which character in Death in Paradise?"
    assert case.docs[case.gold].startswith("Kris Marshall. ") and case.docs[case.other].startswith("Death in")
    assert search_query(case.followup, case.history) == f"{case.followup} Kris Marshall"
    assert make_case(HotpotQuestion.from_json({**record, "type": "comparison"})) is None
    assert make_case(HotpotQuestion.from_json({**record, "question": "Who played DI Goodman?"})) is None  # names neither
