"""Typed results and statistics shared by every layer: answers, citations, drafts, stats.

This module imports nothing else of the project, so every layer (decoders, modes, the UI,
the API, the benchmarks) can hold these values without import cycles. Each class has one
``to_dict()`` for JSON and, where a value is stored and read back (the chat history), a
``from_dict()`` that ignores keys it does not know (rows written by older versions).

    result = mode.answer(answerer, AnswerRequest("What does the contract say?"))
    result.citations[0].label           # "contract.pdf p.3"
    result.stats.generation.decode_tps  # tokens/s of the decode
    result.stats.generation.decoder     # the decoder's DecoderStats (Speedup: its RasdStats), else None
    result.extras                       # the mode's own record (Grounded: its drafts), else None
    json.dumps(result.to_dict())

No type here names a mode: a decoder's stats subclass ``DecoderStats`` and a mode's extras subclass
``ModeExtras``, each registered under its ``kind`` (``register``) so a stored answer is read back as
the type that wrote it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import ClassVar, Protocol


def known_fields(cls: type, data: dict) -> dict:
    """The entries of ``data`` that are fields of dataclass ``cls``."""
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in data.items() if k in names}


# --------------------------------------------------------------------------- citations
class ChunkLike(Protocol):
    """What a citation is made from: a retrieved chunk (``localrag.rag.records.Hit``)."""

    file: str
    page: int | None
    line_start: int | None
    line_end: int | None
    text: str
    chunk_id: str

    def citation(self) -> str: ...

    def snippet(self, width: int = 160) -> str: ...


@dataclass(frozen=True)
class Citation:
    """One retrieved chunk shown under an answer."""

    file: str
    page: int | None
    line_start: int | None
    line_end: int | None
    snippet: str
    text: str
    chunk_id: str
    label: str  # "report.pdf p.3" / "notes.md lines 10-24"

    @classmethod
    def from_hit(cls, hit: ChunkLike) -> Citation:
        return cls(file=hit.file, page=hit.page, line_start=hit.line_start, line_end=hit.line_end,
                   snippet=hit.snippet(), text=hit.text, chunk_id=hit.chunk_id, label=hit.citation())

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> Citation:
        d = {f.name: None for f in fields(cls)} | known_fields(cls, data)
        return cls(**{**d, "file": d["file"] or "", "snippet": d["snippet"] or "", "text": d["text"] or "",
                      "chunk_id": d["chunk_id"] or "", "label": d["label"] or ""})


# --------------------------------------------------------------------------- statistics
_KINDS: dict[str, type] = {}


def register(cls: type) -> type:
    """Class decorator: a ``DecoderStats`` or ``ModeExtras`` subclass, read back by its ``kind``."""
    _KINDS[f"{cls.family}:{cls.kind}"] = cls
    return cls


def _read(family: str, data: dict, default_kind: str):
    """The registered record of ``data["kind"]`` (rows written before kinds existed: ``default_kind``)."""
    kind = data.get("kind") or default_kind
    cls = _KINDS.get(f"{family}:{kind}") or _KINDS[f"{family}:{family}"]
    return cls.from_dict(data)


@dataclass
class DecoderStats:
    """What a decoding strategy did for one answer: steps (target forwards), the tokens they emitted,
    tokens per step and the speedup over plain decoding it estimates. A strategy with more to say
    subclasses it (``register``, a ``kind`` of its own); ``GenerationStats.decoder`` holds any."""

    family: ClassVar[str] = "decoder"
    kind: ClassVar[str] = "decoder"
    steps: int = 0
    tokens: int = 0  # emitted, bonus tokens included
    accepted_per_step: list[int] = field(default_factory=list)  # tokens emitted by each step (plotted)
    mean_accepted: float = 0.0  # tokens per target forward, bonus included
    speedup_vs_plain: float = 0.0  # the strategy's own estimate against plain decoding

    def stats_parts(self) -> list[str]:
        """What the strategy adds to the answer's stats line beyond steps and speedup."""
        return []

    def to_dict(self) -> dict:
        return {"kind": self.kind, **asdict(self)}

    @classmethod
    def from_dict(cls, data: dict) -> DecoderStats:
        return cls(**known_fields(cls, data))

    @staticmethod
    def read(data: dict) -> DecoderStats:
        return _read("decoder", data, default_kind="rasd")  # a row without a kind was Speedup's


@dataclass
class ModeExtras:
    """What a mode adds to its answers beside the shared fields (Grounded: its drafts and phases).
    A mode defines its subclass (``register``, a ``kind`` of its own); the UI shows ``panel()``
    collapsed under the answer and ``stats_parts()`` in its stats line, knowing no mode."""

    family: ClassVar[str] = "extras"
    kind: ClassVar[str] = "extras"

    def panel(self) -> tuple[str, str] | None:
        """(title, Markdown body) of a collapsed panel under the answer; None: no panel."""
        return None

    def stats_parts(self, stats: AnswerStats) -> list[str]:
        """Pieces of the answer's stats line ("5 drafts", "draft 2.10 s"), given its AnswerStats."""
        return []

    def shown(self, text: str, evidence: AnswerEvidence | None) -> tuple[str, AnswerEvidence | None]:
        """The part of the answer's ``text`` shown as the answer, with the evidence of its sentences
        (the rest is in ``panel()``); as it is unless the mode says otherwise."""
        return text, evidence

    def to_dict(self) -> dict:
        return {"kind": self.kind, **asdict(self)}

    @classmethod
    def from_dict(cls, data: dict) -> ModeExtras:
        return cls(**known_fields(cls, data))

    @staticmethod
    def read(data: dict) -> ModeExtras:
        return _read("extras", data, default_kind="extras")

    @staticmethod
    def stored(data: dict) -> ModeExtras | None:
        """The extras of a stored answer (an ``AnswerResult`` dict or a chat history payload). One
        stored before modes had extras kept Grounded's drafts and phase times in shared fields."""
        extras, grounded = data.get("extras"), (data.get("stats") or {}).get("grounded")
        if extras is None and (data.get("drafts") or grounded):
            extras = {"kind": "grounded", **(grounded or {}), "drafts": data.get("drafts") or []}
        return ModeExtras.read(extras) if extras else None


register(DecoderStats)
register(ModeExtras)


@dataclass(frozen=True)
class StepRecord:
    """One RASD step, kept when the decoder records its steps (``RasdDecoder.record_steps``: ``bench
    speed --breakdown``). ``held`` and ``top_ok`` are found after the fact, once the answer is known."""

    start: int  # the answer's index of the first token this step emitted (its root is token start - 1)
    size: int  # drafted nodes verified (0: a plain step)
    depth: int  # the verified tree's deepest path (0: a plain step)
    accepted: int  # drafted tokens accepted (the step emitted accepted + 1)
    verify_s: float  # its forward: verify, accept and commit of a tree, or one plain decode
    between_s: float  # since the previous forward ended (or the answer's first token): Python, proposing
    match_len: int  # the datastore lookup's suffix match (0: none)
    held: int  # the lookup's longest continuation the answer then wrote: what verifying it would have accepted
    top_ok: bool | None  # its most frequent first token was the answer's next token (None: no match)
    unique: bool  # the lookup had one first token only
    forced: bool = False  # a probe
    draft: bool = False  # the draft model proposed
    need: float = 1.0  # the expected gain a bet had to clear when it was planned: min_gain / realism
    t1_ms: float = 0.0  # the cost curve's T(1) it was planned with (after the curve's online correction)


@register
@dataclass
class RasdStats(DecoderStats):
    """What the RASD decoder did for one answer (``localrag.rasd.loop``), beside DecoderStats' own
    fields (steps, tokens, accepted_per_step, mean_accepted, speedup_vs_plain).

    Counters are filled step by step; the summary fields at the end by ``finish``.
    A step is one target forward: a tree step verifies drafted nodes, a plain step one token."""

    kind: ClassVar[str] = "rasd"
    spec_steps: int = 0  # tree steps
    plain_steps: int = 0  # steps where speculation did not pay
    probe_steps: int = 0  # tree steps forced to re-test acceptance
    draft_steps: int = 0  # steps that ran the draft model
    # a draft model was given but sat this answer out: its steps had not paid lately (the draft
    # bandit), or could not win back its reading of the prompt within the answer by the cost
    # model, so it did not even read the prompt (``RasdDecoder.prefill``)
    draft_idle: bool = False
    drafted_by_source: dict[str, int] = field(default_factory=dict)  # verified nodes: draft/retrieval/both
    accepted_by_source: dict[str, int] = field(default_factory=dict)
    tree_sizes: list[int] = field(default_factory=list)  # drafted nodes verified by each tree step
    time_prefill_s: float = 0.0  # the decoder's share of the prompt prefill (draft prefill, suffix index)
    time_retrieve_s: float = 0.0
    time_draft_s: float = 0.0
    time_verify_s: float = 0.0
    time_plain_s: float = 0.0
    lookup_ms_max: float = 0.0
    # summary (``finish``)
    acceptance_by_source: dict[str, float] = field(default_factory=dict)
    lookup_ms_mean: float = 0.0
    t1_ms: float = 0.0  # one plain forward during this answer (how: speedup_method)
    decode_busy_s: float = 0.0  # every step, proposing and drafting included (speedup_vs_plain: tokens x t1
    # over this busy time, an estimate, see ``RasdDecoder._plain_token_s``)
    # how t1 was found: "plain steps" (the median of this answer's own plain forwards) or "cost curve"
    # (its tree steps' verify times scaled by the measured curve's T(1)/T(k))
    speedup_method: str = ""
    oracle_speedup: float = 1.0  # every drafted path accepted to its full depth
    hardware_limit_speedup: float = 1.0  # the best fully-accepted chain on the cost curve
    draft_limit_speedup: float | None = None  # the same when the draft model writes the chain
    expected_gain_mean: float = 0.0
    cost_curve_ms: dict[str, float] = field(default_factory=dict)
    step_log: list[StepRecord] = field(default_factory=list)  # every step, when recorded (else empty)

    @classmethod
    def from_dict(cls, data: dict) -> RasdStats:
        out = cls(**known_fields(cls, data))
        out.step_log = [s if isinstance(s, StepRecord) else StepRecord(**known_fields(StepRecord, s))
                        for s in out.step_log]
        return out

    @property
    def tree_size_mean(self) -> float:
        return sum(self.tree_sizes) / len(self.tree_sizes) if self.tree_sizes else 0.0

    @property
    def tree_size_max(self) -> int:
        return max(self.tree_sizes, default=0)

    def stats_parts(self) -> list[str]:
        # the speedup beside it is then retrieval's alone: said so, or the two read as a contradiction
        return ["draft model idle (it would not repay its time here): retrieval alone speculated"] if self.draft_idle else []

    def to_dict(self) -> dict:
        return {**super().to_dict(), "tree_size_mean": self.tree_size_mean, "tree_size_max": self.tree_size_max}


@dataclass
class GenerationStats:
    """What one generation cost (``localrag.generation.Generation``)."""

    prompt_tokens: int = 0
    reused_prompt_tokens: int = 0
    placed_prompt_tokens: int = 0  # read from the chunk KV cache instead (approximate prefill)
    computed_prompt_tokens: int = 0  # chunk tokens decoded to fill the chunk KV cache (its misses)
    generated_tokens: int = 0
    steps: int = 0
    prefill_seconds: float = 0.0
    decode_seconds: float = 0.0
    stop_reason: str = ""  # eog | stop | length | repetition | cancelled (the asker stopped it) | judged (refused unwritten)
    decoder: DecoderStats | None = None  # the decoding strategy's own stats (None: plain decoding)
    # the mean log-probability the model gave the tokens it wrote (and its end-of-text): how sure it
    # was of its answer; None where the engine reports none (a serving engine)
    mean_logprob: float | None = None

    @property
    def prefill_tps(self) -> float:
        n = self.prompt_tokens - self.reused_prompt_tokens
        return n / self.prefill_seconds if self.prefill_seconds > 0 else 0.0

    @property
    def decode_tps(self) -> float:
        return self.generated_tokens / self.decode_seconds if self.decode_seconds > 0 else 0.0

    @property
    def tokens_per_step(self) -> float:
        return self.generated_tokens / self.steps if self.steps else 0.0

    def to_dict(self) -> dict:
        d = asdict(self)
        d["decoder"] = self.decoder.to_dict() if self.decoder is not None else None
        d.update(prefill_tps=self.prefill_tps, decode_tps=self.decode_tps, tokens_per_step=self.tokens_per_step)
        return d

    @classmethod
    def from_dict(cls, data: dict) -> GenerationStats:
        d = known_fields(cls, data)
        d["decoder"] = DecoderStats.read(d["decoder"]) if d.get("decoder") else None
        return cls(**d)


@dataclass
class SearchStats:
    """The document search behind one answer."""

    query: str = ""
    collection: str | None = None
    k: int = 0
    n_chunks: int = 0  # chunks found (Grounded: retrieved before the relevance gate)
    n_relevant: int | None = None  # Grounded: chunks above the relevance gate
    seconds: float = 0.0
    note: str = ""  # "no index", "the index is empty or nothing matched", ...

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> SearchStats:
        return cls(**known_fields(cls, data))


@dataclass(frozen=True)
class Judgement:
    """The answerability judge's view of one prompt (``localrag.judge``): its name, p(answerable)
    (None: no probe, the evidence check alone decides), whether the answer was refused before it was
    written, and the judge's seconds."""

    judge: str
    p_answerable: float | None = None
    refused_early: bool = False
    seconds: float = 0.0

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> Judgement:
        return cls(**known_fields(cls, data))


@dataclass
class AnswerStats:
    """Everything one answer cost, whatever its mode."""

    mode: str = ""
    total_s: float = 0.0
    search: SearchStats = field(default_factory=SearchStats)
    generation: GenerationStats | None = None  # None: the mode wrote its answer another way (Grounded)
    setup_s: float = 0.0  # mode set-up before decoding (Speedup: the token datastore)
    waited_s: float = 0.0  # time spent queued behind other requests before this answer started
    judge: Judgement | None = None  # None: no judge looked (no documents, a serving engine)

    def to_dict(self) -> dict:
        return {"mode": self.mode, "total_s": self.total_s, "search": self.search.to_dict(),
                "generation": self.generation.to_dict() if self.generation is not None else None,
                "setup_s": self.setup_s, "waited_s": self.waited_s,
                "judge": self.judge.to_dict() if self.judge is not None else None}

    @classmethod
    def from_dict(cls, data: dict) -> AnswerStats:
        d = known_fields(cls, data)
        d["search"] = SearchStats.from_dict(data.get("search") or data.get("retrieval") or {})  # (its old name)
        d["generation"] = GenerationStats.from_dict(d["generation"]) if d.get("generation") else None
        d["judge"] = Judgement.from_dict(d["judge"]) if d.get("judge") else None
        return cls(**d)


# --------------------------------------------------------------------------- evidence
@dataclass(frozen=True)
class CopiedSpan:
    """Answer characters [answer_start, answer_end) were copied from chunk_id's text [start, end)
    (a decoder's copy provenance: Speedup accepting tokens from a retrieval node)."""

    answer_start: int
    answer_end: int
    chunk_id: str
    start: int
    end: int

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> CopiedSpan:
        return cls(**known_fields(cls, data))


@dataclass(frozen=True)
class EvidenceSpan:
    """A supporting passage: characters [start, end) of the chunk's text, and where the chunk is."""

    chunk_id: str
    start: int
    end: int
    file: str
    page: int | None
    line_start: int | None
    line_end: int | None

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> EvidenceSpan:
        d = {"page": None, "line_start": None, "line_end": None, "file": ""} | known_fields(cls, data)
        return cls(**d)


@dataclass(frozen=True)
class Signals:
    """One sentence's evidence signals (``localrag.evidence``)."""

    exact: float
    overlap: float
    embedding: float | None
    missing: tuple[str, ...]
    judge: float | None = None

    def to_dict(self) -> dict:
        return {**asdict(self), "missing": list(self.missing)}

    @classmethod
    def from_dict(cls, data: dict) -> Signals:
        d = {"exact": 0.0, "overlap": 0.0, "embedding": None} | known_fields(cls, data)
        return cls(**{**d, "missing": tuple(d.get("missing") or ())})


@dataclass(frozen=True)
class SentenceEvidence:
    """One sentence of an answer: where it sits, what supports it, its score in [0, 1]."""

    text: str
    start: int  # character offsets in the answer
    end: int
    spans: tuple[EvidenceSpan, ...]
    score: float
    supported: bool
    reason: str  # why not supported ('' when supported)
    signals: Signals

    def to_dict(self) -> dict:
        return {"text": self.text, "start": self.start, "end": self.end, "spans": [s.to_dict() for s in self.spans],
                "score": self.score, "supported": self.supported, "reason": self.reason,
                "signals": self.signals.to_dict()}

    @classmethod
    def from_dict(cls, data: dict) -> SentenceEvidence:
        return cls(text=data.get("text", ""), start=int(data.get("start", 0)), end=int(data.get("end", 0)),
                   spans=tuple(EvidenceSpan.from_dict(s) for s in data.get("spans") or ()),
                   score=float(data.get("score", 0.0)), supported=bool(data.get("supported", False)),
                   reason=data.get("reason", ""), signals=Signals.from_dict(data.get("signals") or {}))


@dataclass(frozen=True)
class AlignmentStats:
    seconds: float
    judged: int = 0  # sentences the judge scored
    judge_seconds: float = 0.0
    copied_given: int = 0  # provenance spans passed in
    copied_confirmed: int = 0  # ... that the alignment found as exact matches of the same chunk text

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> AlignmentStats:
        return cls(**({"seconds": 0.0} | known_fields(cls, data)))


@dataclass(frozen=True)
class AnswerEvidence:
    """Which sentences of an answer the retrieved chunks support, and where (``localrag.evidence``).
    Equality compares the evidence only, not the timing stats or the copy provenance (so one text
    gets equal evidence in Plain and in Speedup, which also reports what it copied)."""

    sentences: tuple[SentenceEvidence, ...]
    score: float  # the answer's support: ``support`` adjusted by how well the evidence meets the question
    supported: bool  # score >= the refusal threshold, and at least one sentence supported
    cited: tuple[str, ...]  # chunk ids of supporting chunks, in order of first use
    also_searched: tuple[str, ...]  # retrieved chunks that support no sentence
    support: float = 0.0  # content-weighted mean of the sentence scores
    context: float = 1.0  # share of the question's content words in the answer or its evidence
    novel: float = 0.0  # share of the answer's new content words (not in the question) found in its evidence
    unmatched: tuple[str, ...] = ()  # numbers and names of the question the evidence does not contain
    relevance: float | None = None  # highest cosine of the question to an evidence window (with an embedder)
    confidence: float | None = None  # the answer model's mean log-probability of its own tokens, where known
    answerable: float | None = None  # the answerability judge's p(answerable) of the question, where judged
    threshold: float = 0.0  # the refusal threshold ``supported`` was decided by
    stats: AlignmentStats = field(compare=False, default=AlignmentStats(0.0))
    copied: tuple[CopiedSpan, ...] = field(compare=False, default=())  # the decoder's copy provenance

    @property
    def seconds(self) -> float:
        return self.stats.seconds

    def to_dict(self) -> dict:
        return {"sentences": [s.to_dict() for s in self.sentences], "score": self.score,
                "supported": self.supported, "cited": list(self.cited), "also_searched": list(self.also_searched),
                "support": self.support, "context": self.context, "novel": self.novel,
                "unmatched": list(self.unmatched), "relevance": self.relevance, "confidence": self.confidence,
                "answerable": self.answerable, "threshold": self.threshold,
                "stats": self.stats.to_dict(), "copied": [c.to_dict() for c in self.copied]}

    @classmethod
    def from_dict(cls, data: dict) -> AnswerEvidence:
        d = known_fields(cls, data)
        return cls(**{**d, "sentences": tuple(SentenceEvidence.from_dict(s) for s in d.get("sentences") or ()),
                      "score": float(d.get("score", 0.0)), "supported": bool(d.get("supported", False)),
                      "cited": tuple(d.get("cited") or ()), "also_searched": tuple(d.get("also_searched") or ()),
                      "unmatched": tuple(d.get("unmatched") or ()),
                      "stats": AlignmentStats.from_dict(d.get("stats") or {}),
                      "copied": tuple(CopiedSpan.from_dict(c) for c in d.get("copied") or ())})


# --------------------------------------------------------------------------- answers
ON_UNSUPPORTED = ("warn", "refuse")  # what an answer the documents do not support gets


@dataclass(frozen=True)
class AnswerProgress:
    """How far an answer has got before its text: a mode's stream may yield these before its text
    pieces (Grounded: searching, drafting 2 of 5, verifying). A consumer that wants only the text
    keeps the ``str`` items and the final ``AnswerResult``, and skips everything else."""

    stage: str  # "searching" | "measuring" (Speedup's first cost curves) | "reading" (the prompt; "reading the
    # conversation" without documents) | "drafting" | "verifying"
    done: int = 0  # drafting: drafts finished; reading: prompt tokens read
    total: int = 0  # drafting: drafts being written; reading: prompt tokens to read

    @property
    def message(self) -> str:
        """In words, for a pending answer: "Drafting answers: 2 of 5 done…"."""
        if self.stage.startswith("reading"):
            what = "your documents" if self.stage == "reading" else "the conversation"
            return f"Reading {what}: {self.done} of {self.total} tokens…"
        if self.stage == "drafting":
            return f"Drafting answers: {self.done} of {self.total} done…"
        if self.stage == "verifying":
            return "Verifying the drafts…"
        if self.stage == "measuring":
            return "Timing this model's forward passes on this machine, once (kept for later answers)…"
        return "Searching your documents…" if self.stage == "searching" else f"{self.stage.capitalize()}…"


@dataclass
class AnswerResult:
    """The end of every answer stream: the text and everything shown under it.

    ``text`` is what the model wrote (the evidence's character offsets point into it). When the
    documents do not support it and the asker chose to refuse, ``refusal`` is what is shown instead,
    and the text stays available, labelled as unsupported."""

    text: str
    mode: str
    citations: list[Citation]  # the chunks that support the answer, in order of first use: [1], [2], ...
    supported: bool  # the answer's support reached the calibrated threshold
    stats: AnswerStats
    searched: str  # what was searched (query, collection, k), in words
    extras: ModeExtras | None = None  # what the mode adds (Grounded: every draft, best first)
    also_searched: list[Citation] = field(default_factory=list)  # retrieved chunks that support nothing
    evidence: AnswerEvidence | None = None  # per sentence: its supporting spans, score, supported
    refusal: str = ""  # refused: the message shown instead of the text ('' when the text is the answer)
    on_unsupported: str = "warn"  # the policy applied: warn | refuse
    notes: list[str] = field(default_factory=list)  # what the mode could not use, and why (a draft model)

    @property
    def refused(self) -> bool:
        return bool(self.refusal)

    def to_dict(self) -> dict:
        return {"text": self.text, "mode": self.mode, "supported": self.supported, "searched": self.searched,
                "refused": self.refused, "refusal": self.refusal, "on_unsupported": self.on_unsupported,
                "citations": [c.to_dict() for c in self.citations],
                "also_searched": [c.to_dict() for c in self.also_searched],
                "evidence": self.evidence.to_dict() if self.evidence is not None else None,
                "extras": self.extras.to_dict() if self.extras is not None else None, "notes": list(self.notes),
                "stats": self.stats.to_dict()}

    @classmethod
    def from_dict(cls, data: dict) -> AnswerResult:
        evidence = data.get("evidence")
        return cls(text=data.get("text") or "", mode=data.get("mode") or "",
                   citations=[Citation.from_dict(c) for c in data.get("citations") or []],
                   supported=bool(data.get("supported", False)),
                   stats=AnswerStats.from_dict(data.get("stats") or {}), searched=data.get("searched") or "",
                   extras=ModeExtras.stored(data), also_searched=[Citation.from_dict(c) for c in data.get("also_searched") or []],
                   evidence=AnswerEvidence.from_dict(evidence) if evidence else None,
                   refusal=data.get("refusal") or "", on_unsupported=data.get("on_unsupported") or "warn",
                   notes=list(data.get("notes") or []))
