"""Grounded mode: Speculative RAG (drafts from chunk subsets, scored by a verifier, with citations).

    from localrag.grounded import GroundedPipeline, load_verifier
    pipe = GroundedPipeline(drafter_engine, load_verifier(GroundedConfig(), ModelConfig()))
    result = pipe.answer(question, index)

Phases: ``subsets`` (cluster, subsets, prompt order) -> ``drafting`` (concurrent drafts) ->
``scoring`` (verifier scores, selection) -> ``pipeline`` (the whole answer).
"""

from localrag.grounded.pipeline import GroundedPipeline, drafter_problem, load_verifier, verifier_config

__all__ = ["GroundedPipeline", "drafter_problem", "load_verifier", "verifier_config"]
