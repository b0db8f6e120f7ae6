"""No silent wait before a first Speedup answer: the first decoder on a machine times the model's
forward passes (its cost curve), says so while it does (``AnswerProgress("measuring")``) and in the
answer's notes, and keeps the curve on disk, so a later answer, even in a new process, does not
wait again. Real llama.cpp (SmolLM2), a real index.

Run: .venv/bin/python -m pytest tests/test_speedup_measuring.py -q
"""

from __future__ import annotations

import pytest

from localrag.answer import Answerer
from localrag.config import GenerationConfig
from localrag.modes import AnswerRequest, get_mode
from localrag.rag import DocumentIndex, IndexConfig
from localrag.results import AnswerProgress, AnswerResult
from tests.sample_docs import write_sample_docs

pytestmark = pytest.mark.slow

QUESTION = "Where does the Zephyr telescope observe the sky from?"


def _stream(answerer: Answerer) -> tuple[list, AnswerResult]:
    speedup = get_mode("speedup")
    request = AnswerRequest(QUESTION, gen=GenerationConfig(max_tokens=8), options=speedup.options({"k": 2}))
    items = list(speedup.stream(answerer, request))
    return items[:-1], items[-1]


def test_the_first_speedup_answer_says_it_times_the_model_once_and_later_ones_do_not(
        smollm2_engine, tmp_path, monkeypatch):
    monkeypatch.setenv("LOCALRAG_CACHE_DIR", str(tmp_path / "cache"))  # no curve measured on this "machine" yet
    idx = DocumentIndex(IndexConfig(index_dir=tmp_path / "index"))
    try:
        assert idx.ingest([write_sample_docs(tmp_path / "docs")]).added == 2
        before, first = _stream(Answerer(smollm2_engine, idx))
        stages = [i.stage for i in before if isinstance(i, AnswerProgress)]
        assert stages and stages[0] == "measuring", stages
        first_text = next(i for i, item in enumerate(before) if isinstance(item, str))
        assert before.index(next(i for i in before if isinstance(i, AnswerProgress))) < first_text
        assert "Timing this model's forward passes" in AnswerProgress("measuring").message
        [note] = [n for n in first.notes if "timed this machine's forward passes" in n]
        assert "kept on disk" in note and first.stats.setup_s > 0
        assert list((tmp_path / "cache" / "cost").glob("*.json"))  # the curve, on disk

        again_before, again = _stream(Answerer(smollm2_engine, idx))  # new runtimes, as a new process has
        assert "measuring" not in [i.stage for i in again_before if isinstance(i, AnswerProgress)]
        assert not [n for n in again.notes if "forward passes" in n]
        assert again.text == first.text  # the stored curve decides nothing about the (lossless) answer
    finally:
        idx.close()


def test_the_timing_done_at_start_leaves_the_first_answer_nothing_to_wait_for(smollm2_engine, tmp_path, monkeypatch):
    """The app's start times the models (``Services.warm_up``, on its generation thread, in line like
    an answer): the first Speedup answer then neither says it is measuring nor waits for it."""
    from localrag.app.config import AppConfig
    from localrag.app.services import Services

    monkeypatch.setenv("LOCALRAG_CACHE_DIR", str(tmp_path / "cache"))  # nothing measured on this "machine" yet
    services = Services(AppConfig(data_dir=tmp_path / "data", index=IndexConfig(index_dir=tmp_path / "index")),
                        engine=smollm2_engine)
    try:
        assert services.index("default").ingest([write_sample_docs(tmp_path / "docs")]).added == 2
        [note] = services.warm_up()
        assert note.startswith("Speedup (RASD): timed the forward passes of smollm2") and " once in " in note, note
        assert list((tmp_path / "cache" / "cost").glob("*.json"))  # the curve, on disk
        assert services.warm_up() == []  # once
        request = services.request("speedup", QUESTION, gen=GenerationConfig(max_tokens=8), values={"k": 2})
        items = list(services.stream("speedup", request))
        assert "measuring" not in [i.stage for i in items if isinstance(i, AnswerProgress)]
        assert not [n for n in items[-1].notes if "forward passes" in n]
    finally:
        services.close()
