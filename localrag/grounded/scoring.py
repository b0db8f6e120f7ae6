"""Speculative RAG's verifier: score every draft in one pass, then select the best-supported one.

Scores (natural log):
    draft_logprob = log P(rationale) + log P(answer | rationale)          (drafter, sum over tokens)
    reflection    = log p("Yes" | question, rationale, answer,
                          "Do you think the rationale supports the answer, yes or no?")  (verifier)
    score         = draft_logprob / n_draft + reflection
The paper multiplies three probabilities: the drafter's, the verifier's of the draft ("self-
consistency") and the reflection's. The draft term is length-normalised to a mean per-token
log-probability (raw sums punish long drafts); the reflection is one token. Self-consistency is
left out: measured on the bundled pair, the verifier's probability of a draft without the
documents is its prior over the words, not their support, and it picked worse drafts than the
drafter's own score (README, "Grounded on the pair"). The verifier reads the rationale before the
answer, so "Yes" judges whether that rationale leads to that answer.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from localrag.backends.base import BatchBackend
from localrag.config import GroundedConfig
from localrag.generation import token_logprob
from localrag.grounded.drafting import decode_rows
from localrag.grounded.extras import GroundedDraft, may_answer


def verifier_text(question: str, answer: str, rationale: str, cfg: GroundedConfig) -> str:
    """What the verifier reads before its "Yes" (in-process and on a serving engine alike)."""
    return (f"Question: {question}\nRationale: {rationale.strip()}\nAnswer: {answer.strip()}\n"
            f"{cfg.reflection_question}\n")


def verifier_tokens(backend: BatchBackend, question: str, answer: str, rationale: str,
                    cfg: GroundedConfig) -> list[int]:
    """One verifier input: ``verifier_text`` then the first token of "Yes" (one token in both
    bundled vocabularies), whose log-probability is the reflection."""
    tokens = backend.tokenize(verifier_text(question, answer, rationale, cfg), add_special=backend.add_bos)
    return tokens + backend.tokenize("Yes", add_special=False)[:1]


def score_drafts(backend: BatchBackend, question: str, drafts: Sequence[tuple[str, str]],
                 cfg: GroundedConfig) -> list[float]:
    """The reflection of every (answer, rationale), in one pass: all drafts are KV sequences of one
    batch, and only the row before each "Yes" is requested (the vocabulary is large)."""
    backend.reset()
    entries, yes = [], []
    for s, (answer, rationale) in enumerate(drafts):
        toks = verifier_tokens(backend, question, answer, rationale, cfg)
        entries += [(t, p, s, p == len(toks) - 2) for p, t in enumerate(toks)]
        yes.append(toks[-1])
    rows = decode_rows(backend, entries)
    backend.reset()
    return [token_logprob(row, tok) for row, tok in zip(rows, yes, strict=True)]


# --------------------------------------------------------------------------- select
def combined_score(draft_logprob: float, n_tokens: int, reflection: float | None) -> float:
    """Mean draft log-prob (the sum over the draft's n tokens) + log p(Yes); without a verifier
    (drafter-only ablation, or a server that returned none) the first alone."""
    return draft_logprob / max(n_tokens, 1) + (reflection or 0.0)


_LEAD_IN = re.compile(
    r"^(?:(?:answer|final answer|rationale|a)\s*:|the answer is:?|(?:according to|based on|from) (?:the )?"
    r"(?:documents?|sources?|text|passage|context)\b[^,]*,)\s*",
    re.I,
)


def short_answer(text: str) -> str:
    """The answer as a phrase: its first line, without lead-ins ("Answer:", "The answer is",
    "According to the documents, ..."), wrapping quotes or markup, and a final full stop."""
    line = next((ln.strip() for ln in text.strip().splitlines() if ln.strip()), "")
    while True:
        cut = _LEAD_IN.sub("", line, count=1).strip()
        if cut == line:
            break
        line = cut
    line = line.strip(" *\"'`")
    return line[:-1].rstrip() if line.endswith(".") else line


def usable(drafts: Sequence[GroundedDraft]) -> list[GroundedDraft]:
    """The drafts that may be the answer, in their order."""
    return [d for d in drafts if may_answer(d)]


def select(drafts: list[GroundedDraft], cfg: GroundedConfig) -> tuple[GroundedDraft | None, bool]:
    """(best draft or None, supported): best usable draft by score; supported when it passes the threshold."""
    candidates = usable(drafts)
    if not candidates:
        return None, False
    best = max(candidates, key=lambda d: d.score)
    return best, best.score >= cfg.min_score
