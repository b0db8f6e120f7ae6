"""Speedup mode (RASD): retrieval + draft token trees verified losslessly in one forward pass.

    from localrag.rasd import RasdDecoder, load_draft
    decoder = RasdDecoder(engine.backend, RasdConfig(), draft=None, documents=[text])
    gen = engine.chat(messages, GenerationConfig(), decoder=decoder)

The phases and the cost model: docs/design.md ("Speedup: RASD").
"""

from localrag.rasd.draft import check_vocab, load_draft
from localrag.rasd.loop import CopiedToken, RasdDecoder, measure_costs, unmeasured
from localrag.rasd.tree import TokenTree

__all__ = ["CopiedToken", "RasdDecoder", "TokenTree", "check_vocab", "load_draft", "measure_costs", "unmeasured"]
