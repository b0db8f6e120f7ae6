"""A real API server (``python -m localrag serve``) on a free loopback port, over a real index of
two small documents and the bundled model, started once per test module."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.sample_docs import write_sample_docs

ROOT = Path(__file__).resolve().parents[2]

MODEL = "smollm2-135m-instruct"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """``python -m localrag serve`` as a subprocess; ``url`` is its /v1 base."""

    def __init__(self, tmp: Path, *args: str) -> None:
        self.tmp, self.port, self.args = tmp, free_port(), args
        self.log = tmp / f"serve-{self.port}.log"
        self.proc: subprocess.Popen | None = None

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return self.base + "/v1"

    def start(self, timeout: float = 300) -> Server:
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "ANONYMIZED_TELEMETRY": "False",
               "OMP_WAIT_POLICY": "PASSIVE"}
        env.pop("LOCALRAG_API_KEY", None)
        with open(self.log, "a") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "localrag", "serve", "--port", str(self.port), "--index-dir",
                 str(self.tmp / "index"), "--data-dir", str(self.tmp / "data"), "--model", MODEL, *self.args],
                cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"serve exited with {self.proc.returncode}:\n{self.log.read_text()[-3000:]}")
            try:
                urllib.request.urlopen(self.url + "/models", timeout=5)
                return self
            except urllib.error.HTTPError:  # 401 with a key: it is up
                return self
            except OSError:
                time.sleep(0.5)
        pytest.fail(f"serve did not answer within {timeout} s:\n{self.log.read_text()[-3000:]}")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture(scope="module")
def docs_index(tmp_path_factory) -> Path:
    """A folder whose index/ holds the collection "docs" (zephyr.md, garden.txt), ingested for real."""
    from localrag.rag import DocumentIndex, IndexConfig

    tmp = tmp_path_factory.mktemp("api")
    src = write_sample_docs(tmp / "docs")
    index = DocumentIndex(IndexConfig(index_dir=tmp / "index", collection="docs"))
    report = index.ingest([src])
    assert report.added == 2 and not report.failed
    index.close()
    return tmp


@pytest.fixture(scope="module")
def server(docs_index):
    s = Server(docs_index).start()
    yield s
    s.stop()
