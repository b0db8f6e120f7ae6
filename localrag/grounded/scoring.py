"""Speculative RAG's verifier: score every draft in one pass, then select the best-supported one.

Scores (natural log):
    draft_logprob = log P(rationale) + log P(answer | rationale)          (drafter, sum over tokens)
    consistency   = sum of log p over the answer and rationale tokens      (verifier)
    reflection    = log p("Yes" | ..., "Do you think the rationale supports the answer, yes or no?")
    score         = draft_logprob / n_draft + consistency / n_verify + reflection
The paper multiplies the three probabilities (sum of logs). Raw sums punish long drafts, so the
first two terms are length-normalised to mean per-token log-probabilities (log of the geometric
mean probability); the reflection term is one token and is left as is.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from localrag.backends.base import BatchBackend
from localrag.config import GroundedConfig
from localrag.generation import token_logprob
from localrag.grounded.drafting import DrafterOutput, decode_rows
from localrag.grounded.extras import GroundedDraft, may_answer
from localrag.grounded.extras import is_refusal as is_refusal  # re-exported: benchmarks use it


@dataclass
class VerifyScore:
    consistency: float
    reflection: float
    n_tokens: int  # answer + rationale tokens scored


def verifier_segments(backend: BatchBackend, question: str, answer: str, rationale: str,
                      cfg: GroundedConfig) -> tuple[list[int], list[int], list[int]]:
    """(tokens, scored positions for consistency, the "Yes" position) of one verifier input.

    Layout: [BOS] "Question: q\\nAnswer:" + " answer" + "\\nRationale:" + " rationale" +
    "\\n<reflection question>\\n" + "Yes". Segments are tokenized separately so the answer and
    rationale tokens are exactly identifiable.
    """
    bos = backend.add_bos
    segs = [
        (backend.tokenize(f"Question: {question}\nAnswer:", add_special=bos), False),
        (backend.tokenize(" " + answer.strip(), add_special=False), True),
        (backend.tokenize("\nRationale:", add_special=False), False),
        (backend.tokenize(" " + rationale.strip(), add_special=False) if rationale.strip() else [], True),
        (backend.tokenize(f"\n{cfg.reflection_question}\n", add_special=False), False),
    ]
    tokens: list[int] = []
    scored: list[int] = []
    for toks, is_scored in segs:
        if is_scored:
            scored += range(len(tokens), len(tokens) + len(toks))
        tokens += toks
    yes = backend.tokenize("Yes", add_special=False)
    yes_at = len(tokens)
    tokens += yes[:1]  # the first token of "Yes" (one token in both bundled vocabularies)
    return tokens, scored, [yes_at]


def score_drafts(backend: BatchBackend, question: str, drafts: Sequence[tuple[str, str]],
                 cfg: GroundedConfig) -> list[VerifyScore]:
    """Score every (answer, rationale) in one pass: all drafts are KV sequences of one batch.

    Token t at position p is scored from the logits row of position p-1, so only those rows
    are requested (the verifier's vocabulary is large; full rows for every token would cost
    ~1 MB each for Gemma-3).
    """
    backend.reset()
    entries, want = [], []  # want: (draft, kind, token) per requested row, in batch order
    for s, (answer, rationale) in enumerate(drafts):
        toks, scored, yes_at = verifier_segments(backend, question, answer, rationale, cfg)
        need = {p - 1: ("c", toks[p]) for p in scored if p > 0}
        need[yes_at[0] - 1] = ("y", toks[yes_at[0]])
        for p, t in enumerate(toks):
            out = p in need
            entries.append((t, p, s, out))
            if out:
                want.append((s, *need[p]))
    rows = decode_rows(backend, entries)
    cons = [0.0] * len(drafts)
    refl = [0.0] * len(drafts)
    count = [0] * len(drafts)
    for (s, kind, tok), row in zip(want, rows, strict=True):
        lp = token_logprob(row, tok)
        if kind == "c":
            cons[s] += lp
            count[s] += 1
        else:
            refl[s] = lp
    backend.reset()
    return [VerifyScore(cons[s], refl[s], count[s]) for s in range(len(drafts))]


# --------------------------------------------------------------------------- select
def combined_score(d: DrafterOutput, v: VerifyScore | None) -> float:
    """Length-normalised log score: mean draft log-prob + mean consistency log-prob + log p(Yes).

    Without a verifier (drafter-only ablation) just the mean draft log-prob.
    """
    s = d.logprob / max(d.n_tokens, 1)
    if v is not None:
        s += v.consistency / max(v.n_tokens, 1) + v.reflection
    return s


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
