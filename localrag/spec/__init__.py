"""RASD speedup mode: retrieval + draft token trees verified losslessly in one forward pass.

from localrag.spec import make_rasd_decoder, load_draft
decoder, stats = make_rasd_decoder(engine.backend, SpecConfig(), draft=None, documents=[text])
gen = engine.chat(messages, GenerationConfig(), decoder=decoder, decoder_stats=stats)
"""

from localrag.spec.decode import RasdDecoder, make_rasd_decoder
from localrag.spec.draft import check_vocab, load_draft
from localrag.spec.tree import TokenTree

__all__ = ["RasdDecoder", "TokenTree", "check_vocab", "load_draft", "make_rasd_decoder"]
