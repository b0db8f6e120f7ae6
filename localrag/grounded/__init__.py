"""Grounded mode: Speculative RAG (drafts from chunk subsets, scored by a verifier, with citations).

    from localrag.grounded import GroundedPipeline
    pipe = GroundedPipeline(drafter_engine, verifier_engine, GroundedConfig())
    result = pipe.answer(question, index)

Phases: ``subsets`` (cluster, subsets, prompt order) -> ``drafting`` (concurrent drafts) ->
``scoring`` (verifier scores, selection) -> ``pipeline`` (the whole answer).
"""

from localrag.grounded.pipeline import GroundedPipeline, drafter_problem

__all__ = ["GroundedPipeline", "drafter_problem"]
