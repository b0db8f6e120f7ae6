"""Shared test setup: offline model hubs, and real bundled models loaded once per session."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")
# torch's OpenMP pool spins while idle; on a 2-core machine shared with llama.cpp's threads that
# makes every forward 10x slower. Passive waiting costs nothing measurable when cores are free.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import pytest  # noqa: E402

from localrag.config import ModelConfig  # noqa: E402


@pytest.fixture(scope="session")
def smollm2():
    """The bundled default model in our llama.cpp backend (2 threads, 4k context)."""
    from localrag.backends.llamacpp import LlamaCppBackend

    be = LlamaCppBackend(ModelConfig(model="smollm2-135m-instruct", n_ctx=4096))
    yield be
    be.close()


@pytest.fixture(scope="session")
def smollm2_engine(smollm2):
    from localrag.engine import Engine

    return Engine(smollm2)
