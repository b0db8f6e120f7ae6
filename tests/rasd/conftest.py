"""Fixtures for the RASD tests: a private cost-curve cache dir, and gemma3 loaded once."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True, scope="session")
def _spec_cache_dir(tmp_path_factory):
    import os

    old = os.environ.get("LOCALRAG_CACHE_DIR")
    os.environ["LOCALRAG_CACHE_DIR"] = str(tmp_path_factory.mktemp("spec-cache"))
    yield
    if old is None:
        os.environ.pop("LOCALRAG_CACHE_DIR", None)
    else:
        os.environ["LOCALRAG_CACHE_DIR"] = old


@pytest.fixture(scope="session")
def smollm2_draft():
    """A second smollm2 context: the target used as its own draft model."""
    from localrag.backends.llamacpp import LlamaCppBackend
    from localrag.config import ModelConfig

    be = LlamaCppBackend(ModelConfig(model="smollm2-135m-instruct", n_ctx=4096, n_seq_max=32))
    yield be
    be.close()
