"""The evidence aligner with the bundled MiniLM: the embedding and relevance signals on real vectors.

Run: HF_HUB_OFFLINE=1 .venv/bin/python -m pytest tests/rag/test_evidence_minilm.py -q
"""

from __future__ import annotations

from dataclasses import dataclass

from localrag.evidence import EvidenceAligner


@dataclass(frozen=True)
class Chunk:
    chunk_id: str
    text: str
    file: str = "notes.md"
    page: int | None = None
    line_start: int | None = 1
    line_end: int | None = 3


CHUNKS = [Chunk("zephyr", "The Zephyr telescope stands on Mount Kora. The mirror was polished by Marta Ilves in 1998, "
                          "after two years of grinding."),
          Chunk("garden", "Tomatoes need full sun and deep watering twice a week.")]
QUESTION = "Who polished the mirror of the Zephyr telescope?"


def test_a_paraphrase_is_supported_with_real_embeddings(embedder):
    aligner = EvidenceAligner(embedder)
    para = aligner.align("Marta Ilves gave the telescope's mirror its polish.", CHUNKS, question=QUESTION)
    (s,) = para.sentences
    assert s.supported and s.signals.exact < 0.5 and para.cited == ("zephyr",)
    off = aligner.align("Marta Ilves likes tomatoes with full sun.", CHUNKS, question=QUESTION).sentences[0]
    assert s.signals.embedding > off.signals.embedding
    assert para.relevance is not None and para.relevance > 0.5


def test_relevance_tells_the_question_asked_apart(embedder):
    aligner = EvidenceAligner(embedder)
    answer = "The mirror was polished by Marta Ilves in 1998."
    asked = aligner.align(answer, CHUNKS, question=QUESTION)
    other = aligner.align(answer, CHUNKS, question="How often should tomatoes be watered?")
    assert asked.relevance > other.relevance and asked.score > other.score
    assert asked.sentences[0].spans == other.sentences[0].spans  # the evidence itself is the same
