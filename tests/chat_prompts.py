"""Real-length RAG chat prompts for the determinism tests: the chat template, five retrieved
chunks of about 200 tokens and a question. The sources are a frozen copy of this project's own
documentation (``tests/data/rag_sources.md``: README and design notes as they were when these
tests were written), cut into chunks, so no download is needed and editing the docs cannot
change what the tests decode."""

from __future__ import annotations

import re

from localrag.answer import rag_messages
from localrag.config import GenerationConfig, repo_root
from localrag.engine import Engine
from localrag.generation import Decoder, Generation, PlainDecoder

QUESTIONS = [
    "How does the Speedup mode decide how many tree nodes to verify? Quote the sources.",
    "What happens to a file that cannot be ingested, and where are uploads stored?",
]


class Chunk:
    """A retrieved chunk as the answer layer sees it (text and a citation label)."""

    def __init__(self, text: str, label: str):
        self.text, self.label = text, label

    def citation(self) -> str:
        return self.label


def doc_chunks(engine: Engine, tokens_per_chunk: int = 200) -> list[Chunk]:
    """The frozen documentation's paragraphs, packed into chunks of about 200 tokens."""
    chunks, cur = [], []
    for path in (repo_root() / "tests" / "data" / "rag_sources.md",):
        for para in re.split(r"\n\s*\n", path.read_text()):
            para = para.strip()
            if not para or para.startswith(("```", "|", "!")):
                continue
            cur.append(para)
            if len(engine.backend.tokenize("\n\n".join(cur))) >= tokens_per_chunk:
                chunks.append(Chunk("\n\n".join(cur), f"{path.name} part {len(chunks) + 1}"))
                cur = []
    return chunks


def rag_prompt(engine: Engine, question: str, chunks: list[Chunk], history=()) -> list[int]:
    return engine.encode_prompt(engine.prompt.render(rag_messages(question, chunks, list(history))))


def answer(engine: Engine, ids: list[int], decoder: Decoder, fresh: bool = True,
           max_tokens: int = 256) -> Generation:
    if fresh:
        engine.backend.reset()
    cfg = GenerationConfig(max_tokens=max_tokens, stop=engine.prompt.stop)
    return Generation(engine.backend, ids, decoder, cfg).run()


def through_prompt_cache(engine: Engine, ids: list[int], max_tokens: int = 256) -> Generation:
    """Plain, with the KV cache holding the prompt's first two thirds and other tokens after them."""
    cut = len(ids) * 2 // 3
    engine.backend.reset()
    engine.backend.prefill(ids[:cut] + ids[1:17])
    gen = answer(engine, ids, PlainDecoder(), fresh=False, max_tokens=max_tokens)
    assert gen.stats.reused_prompt_tokens == cut
    return gen


def selected(chunks: list[Chunk], k: int) -> list[Chunk]:
    """Five chunks spread over the documents, starting at the k-th."""
    return chunks[k::max(1, len(chunks) // 5)][:5]
