"""A mode is one file plus one registry line: a fake mode registered here reaches the UI's mode list,
the command line's ``--mode`` (and a flag for its option) and the API's ``mode`` (and ``options``),
with no other change anywhere.

Run: .venv/bin/python -m pytest tests/test_mode_registry.py -q
"""

from __future__ import annotations

import io
import json
from contextlib import redirect_stdout
from dataclasses import dataclass

import pytest
from fastapi.testclient import TestClient

from localrag.app.config import AppConfig
from localrag.app.services import Services
from localrag.modes import MODES, AnswerMode, ModeOptions, option
from localrag.rag.config import IndexConfig
from localrag.results import AnswerResult, AnswerStats

pytestmark = pytest.mark.slow  # the CLI and the API load the small bundled model


@dataclass(frozen=True)
class EchoOptions(ModeOptions):
    shout: bool = option(False, "answer in capitals", lambda v: v.lower() in ("1", "true", "yes"))


class EchoMode(AnswerMode):
    """Answers with the question itself (no model, no documents): the smallest mode there is."""

    id = "echo"
    label = "Echo (test)"
    summary = "says the question back"
    options_type = EchoOptions

    def stream(self, answerer, request):
        opts = self.options_of(request)
        text = request.question.upper() if opts.shout else request.question
        yield text
        yield AnswerResult(text=text, mode=self.id, citations=[], supported=False, stats=AnswerStats(mode=self.id),
                           searched="nothing")


@pytest.fixture
def echo_registered(monkeypatch):
    monkeypatch.setitem(MODES, "echo", EchoMode())  # the one registry line
    yield


def test_the_ui_lists_it(echo_registered, tmp_path):
    from localrag.ui.handlers import SettingsController

    services = Services(AppConfig(data_dir=tmp_path / "data", index=IndexConfig(index_dir=tmp_path / "index")))
    try:
        assert services.modes["echo"].label == "Echo (test)"
        assert "**Echo (test)**" in SettingsController(services).mode_note("plain")
        assert services.request("echo", "hi", values={"shout": "yes", "k": 3}).options == EchoOptions(shout=True)
    finally:
        services.close()


def test_the_cli_takes_it_and_its_option(echo_registered, tmp_path):
    from localrag.__main__ import main

    out = io.StringIO()
    with redirect_stdout(out):
        code = main(["ask", "is anybody there", "--mode", "echo", "--shout", "yes", "--json",
                     "--model", "smollm2-135m-instruct", "--index-dir", str(tmp_path / "index")])
    assert code == 0
    assert json.loads(out.getvalue())["text"] == "IS ANYBODY THERE"


def test_the_api_takes_it_and_its_options(echo_registered, tmp_path, smollm2_engine):
    from localrag.api.app import create_app

    services = Services(AppConfig(data_dir=tmp_path / "data", index=IndexConfig(index_dir=tmp_path / "index")),
                        engine=smollm2_engine)
    try:
        client = TestClient(create_app(services, host="127.0.0.1"))
        body = {"model": "smollm2-135m-instruct", "mode": "echo", "options": {"shout": True},
                "messages": [{"role": "user", "content": "hello there"}]}
        reply = client.post("/v1/chat/completions", json=body)
        assert reply.status_code == 200, reply.text
        assert reply.json()["choices"][0]["message"]["content"] == "HELLO THERE"
        bad = client.post("/v1/chat/completions", json={**body, "mode": "nope"})
        assert bad.status_code == 400 and "echo" in bad.json()["error"]["message"]  # listed among the choices
    finally:
        services.answerer = None  # the session's engine is not ours to close
        services.close()
