"""A real llama-server (built on demand from llama-cpp-python's vendored llama.cpp, cached) serving
the bundled SmolLM2-135M on a loopback port: 2 threads, 2048 tokens of context, 2 slots."""

from __future__ import annotations

import pytest

from localrag.backends.endpoint import EndpointEngine
from localrag.backends.llama_server import LlamaServer, LlamaServerConfig
from localrag.llamacpp_build import BuildUnavailable, llama_programs
from localrag.models import resolve
from tests.conftest import require_or_skip

ALIAS = "smollm2"


@pytest.fixture(scope="session")
def server_exe():
    """The llama-server program; the first run builds it (minutes on 2 cores). A failed build fails
    the test under CI (``require_or_skip``)."""
    try:
        return llama_programs(["llama-server"])["llama-server"]
    except BuildUnavailable as exc:
        require_or_skip(str(exc))


@pytest.fixture(scope="session")
def smollm2_path():
    return resolve("smollm2-135m-instruct").path


@pytest.fixture(scope="session")
def server_config(smollm2_path):
    return LlamaServerConfig(model=smollm2_path, n_ctx=2048, threads=2, parallel=2, alias=ALIAS)


@pytest.fixture(scope="session")
def server(server_exe, server_config):
    with LlamaServer(server_config, exe=server_exe) as running:
        yield running


@pytest.fixture
def engine(server):
    with EndpointEngine(server.endpoint()) as client:
        yield client
