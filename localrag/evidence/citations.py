"""Citations computed from the evidence: the chunks an answer cites, the ones it does not, and the
answer with ``[n]`` markers after the sentences they support, and why an unsupported answer is so."""

from __future__ import annotations

import math
from collections.abc import Sequence

from localrag.evidence.records import MarkedAnswer
from localrag.results import AnswerEvidence, ChunkLike, Citation


def split_citations(evidence: AnswerEvidence, retrieved: Sequence[ChunkLike]) -> tuple[list[Citation], list[Citation]]:
    """(citations, also searched): the retrieved chunks the evidence cites, in order of first use
    (marker [n] is citation n), and the other retrieved chunks, in retrieval order."""
    by_id = {c.chunk_id: c for c in retrieved}
    cited = [Citation.from_hit(by_id[cid]) for cid in evidence.cited if cid in by_id]
    seen = {c.chunk_id for c in cited}
    also = []
    for chunk in retrieved:
        if chunk.chunk_id not in seen:
            seen.add(chunk.chunk_id)
            also.append(Citation.from_hit(chunk))
    return cited, also


def mark_citations(answer: str, evidence: AnswerEvidence) -> MarkedAnswer:
    """The answer with ``[n]`` after every supported sentence, n numbering the cited chunks in
    order of first use (``evidence.cited``)."""
    number = {cid: k for k, cid in enumerate(evidence.cited, start=1)}
    pieces, at = [], 0
    for s in evidence.sentences:
        if not s.supported:
            continue
        marks = "".join(f"[{number[c]}]" for c in dict.fromkeys(sp.chunk_id for sp in s.spans))
        pieces += [answer[at:s.end], marks]
        at = s.end
    pieces.append(answer[at:])
    return MarkedAnswer("".join(pieces), evidence.cited)


def unsupported_reason(evidence: AnswerEvidence | None) -> str:
    """Why the documents do not support an answer, in words."""
    if evidence is None or not evidence.sentences:
        return "no answer was written"
    if not evidence.cited:
        return "nothing in the answer was found in them"
    why = f"its support {evidence.score:.3f} is below the calibrated threshold {evidence.threshold:.3f}"
    if evidence.confidence is not None:  # the geometric mean of the probabilities of its tokens
        why += f"; the model's confidence in its words: {math.exp(evidence.confidence):.0%}"
    return why
