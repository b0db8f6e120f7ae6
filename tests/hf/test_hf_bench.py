"""The `bench speed --backend hf` methods (transformers' own generate loops) on a tiny model."""

from __future__ import annotations

from types import SimpleNamespace

from localrag.bench.speed_hf import extra_methods, hf_plain, hf_pld, timed_generate
from localrag.config import GenerationConfig
from localrag.generation import Generation, PlainDecoder
from tests.hf.conftest import tiny_backend, tiny_model
from tests.hf.test_hf_rasd import tiny_prompt


class _Engine(SimpleNamespace):
    """What the bench methods read from an Engine: just the backend."""


def test_hf_methods_match_our_plain_greedy():
    be = tiny_backend(seed=21)
    cfg = GenerationConfig(max_tokens=30)
    ours = Generation(be, tiny_prompt(), PlainDecoder(), cfg).run().tokens
    engine = _Engine(backend=be)
    for method in (hf_plain, hf_pld):
        r = method(engine, tiny_prompt(), cfg, [])
        assert r.tokens == ours and r.decode_s > 0
    assistant = tiny_model(seed=22)  # a different small model: output must still be the target's
    r = timed_generate(engine, tiny_prompt(), cfg, assistant_model=assistant)
    assert r.tokens == ours


def test_extra_methods_offer_assisted_only_with_a_draft():
    assert set(extra_methods(SimpleNamespace(draft=None))) == {"hf-plain", "hf-pld"}
    assert "hf-assisted" in extra_methods(SimpleNamespace(draft="smollm2-135m-instruct"))
