"""What Grounded mode adds to its answers: every draft with its scores, and the phases' times.

    extras = result.extras                    # a GroundedExtras (registered as kind "grounded")
    extras.drafts[0].answer, extras.drafts[0].score
    title, body = extras.panel()              # "🧪 Drafts (5) · chosen #2", one block per draft

The UI shows ``panel()`` collapsed under the answer and ``stats_parts()`` in its stats line; it
knows nothing else of this mode (``localrag.results.ModeExtras``).
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import ClassVar

from localrag.evidence import is_refusal
from localrag.results import AnswerEvidence, AnswerStats, Citation, ModeExtras, known_fields, register

DRAFTER, ANSWER_MODEL = "drafter", "answer model"


@dataclass
class GroundedDraft:
    """One Grounded-mode (Speculative RAG) draft and its scores, all natural-log
    (see ``localrag.grounded.scoring``).

    draft_logprob: log P(rationale) + log P(answer | rationale) under the drafter (sum over tokens).
    reflection: the verifier's log p("Yes") after the self-reflection question.
    score: the length-normalised combination used for selection.
    """

    answer: str
    rationale: str
    citations: list[Citation]
    draft_logprob: float
    reflection: float
    score: float
    n_draft_tokens: int = 0
    subset: tuple[int, ...] = ()  # indices into the retrieved chunks
    dropped: str = ""  # why this draft cannot be the answer ("" when it can): its answer never ended
    check: str = ""  # why the documents do not support it ('' when its evidence check passed)
    origin: str = DRAFTER  # who wrote it: a subset's drafter, or the answer model over all the chunks

    @property
    def text(self) -> str:
        """The draft as Grounded mode's answer text: the answer, then its rationale (checked
        together, the answer's own sentences supported too: ``pipeline.check_draft``; the page
        shows the answer alone, ``GroundedExtras.shown``)."""
        return self.answer if not self.rationale else f"{self.answer}\n\nRationale: {self.rationale}"

    def to_dict(self) -> dict:
        d = asdict(self)
        d["subset"] = list(self.subset)
        return d

    @classmethod
    def from_dict(cls, data: dict) -> GroundedDraft:
        nan = float("nan")
        d = {"answer": "", "rationale": "", "draft_logprob": nan, "reflection": nan,
             "score": nan} | known_fields(cls, data)
        d["citations"] = [Citation.from_dict(c) for c in d.get("citations") or []]
        d["subset"] = tuple(d.get("subset") or ())
        return cls(**d)


UNRECORDED = -1


def may_answer(draft: GroundedDraft) -> bool:
    """The draft may be the answer: it finished (not dropped) and does not decline to answer (the
    answer model's written answer is empty when it only declined: ``answer.checked_result``)."""
    if draft.origin == ANSWER_MODEL:
        return bool(draft.answer.strip())
    return not draft.dropped and not is_refusal(draft.answer)


@register
@dataclass
class GroundedExtras(ModeExtras):
    """Grounded mode's record of one answer: every draft, best first, and what each phase took.
    ``scoring``: the terms of the drafts' scores ("drafter + reflection": the drafter's
    log-probabilities and the verifier's reflection; "drafter only": the drafter-only ablation;
    a serving engine names those its replies held)."""

    kind: ClassVar[str] = "grounded"
    drafts: list[GroundedDraft] = field(default_factory=list)
    cluster_s: float = 0.0
    draft_s: float = 0.0
    verify_s: float = 0.0
    n_drafts: int = 0
    draft_tokens: int = 0
    threshold: float = 0.0
    unsupported_reason: str = ""
    scoring: str = "drafter + reflection"
    choice: int | None = UNRECORDED  # the chosen draft's index, None when the answer was refused
    why_chosen: str = ""

    def chosen(self) -> int | None:
        """The chosen draft's index (None: none was, the answer was refused). A record written before
        the choice was stored: the best-scoring draft that may be the answer."""
        if self.choice != UNRECORDED:
            return self.choice
        ranked = [i for i, d in enumerate(self.drafts) if may_answer(d)]
        return max(ranked, key=lambda i: _finite(self.drafts[i].score), default=None)

    def shown(self, text: str, evidence: AnswerEvidence | None) -> tuple[str, AnswerEvidence | None]:
        """The chosen draft's answer without its "Rationale: ..." (the text is both, checked as
        one): the rationale is in the drafts panel, and the answer keeps its own sentences' evidence."""
        best = self.chosen()
        if best is None:
            return text, evidence
        draft = self.drafts[best]
        if not draft.rationale or text != draft.text:
            return text, evidence
        cut = len(draft.answer)
        if evidence is not None:
            evidence = replace(evidence, sentences=tuple(s for s in evidence.sentences if s.end <= cut))
        return text[:cut], evidence

    def panel(self) -> tuple[str, str] | None:
        if not self.drafts:
            return None
        best = self.chosen()
        chosen = f"chosen #{best + 1}, score {_f(self.drafts[best].score)}" if best is not None else "none chosen"
        why = f"\n\n*{html.escape(self.why_chosen or self.unsupported_reason)}*" if (
            self.why_chosen or self.unsupported_reason) else ""
        return f"🧪 Drafts ({len(self.drafts)}) · {chosen}", drafts_markdown(self.drafts, best) + why

    def stats_parts(self, stats: AnswerStats) -> list[str]:
        return [f"{self.n_drafts} drafts", f"retrieve {stats.search.seconds:.2f} s", f"draft {self.draft_s:.2f} s",
                f"verify {self.verify_s:.2f} s"]

    def to_dict(self) -> dict:
        return {**super().to_dict(), "drafts": [d.to_dict() for d in self.drafts]}

    @classmethod
    def from_dict(cls, data: dict) -> GroundedExtras:
        d = known_fields(cls, data)
        d["drafts"] = [GroundedDraft.from_dict(x) for x in d.get("drafts") or []]
        return cls(**d)


def drafts_markdown(drafts: Sequence[GroundedDraft], best: int | None) -> str:
    """One block per draft (a seven-column table squeezed its headers into a chat bubble):

        **#1 ✅ Marta Ilves** · score -1.100
        draft log p -3.200 · reflection -0.200 · from zephyr.md lines 3-4
        > *The text says Marta Ilves polished it.*

    A dropped draft (its answer never ended) shows what it wrote with "…" and why it was dropped.
    Everything a model or a document wrote is HTML-escaped.
    """
    blocks = []
    for i, d in enumerate(drafts):
        mark = " ✅" if i == best else ""
        answer = html.escape(" ".join(d.answer.split())) or "(empty)"
        if d.dropped:
            answer = f"{answer}… ✂ dropped: {html.escape(d.dropped)}"
        who = "answer model, all chunks" if d.origin == ANSWER_MODEL else "drafter"
        check = f" · ✗ {html.escape(d.check)}" if d.check else " · evidence ✓"
        lines = [f"**#{i + 1}{mark} {answer}** · score {_f(d.score)}",
                 f"{who} · log p {_f(d.draft_logprob)} · reflection {_f(d.reflection)}{check}"
                 + (f" · from {', '.join(c.label for c in d.citations)}" if d.citations else "")]
        if d.rationale:
            lines.append(f"> *{html.escape(' '.join(d.rationale.split()))}*")
        blocks.append("  \n".join(lines[:2]) + ("\n\n" + lines[2] if len(lines) > 2 else ""))
    return "\n\n".join(blocks)


def _finite(v: float) -> float:
    return v if math.isfinite(v) else -math.inf


def _f(v: float) -> str:
    return f"{v:.3f}" if math.isfinite(v) else "–"
