"""The answer layer's shared core: the loaded models, the document indexes, retrieval, the
standard-RAG prompt, and the check every answer goes through before it is shown: its sentence-level
evidence in the chunks it was written from (``Answerer.check``), the citations computed from that
evidence, and honest refusal when the documents do not support it (``checked_result``,
``apply_policy``). Answering modes (``localrag.modes``) run on top of one ``Answerer``:

    answerer = Answerer(Engine.load(ModelConfig()), DocumentIndex(IndexConfig()))
    mode = get_mode("plain")                       # localrag.modes: plain | rasd | grounded
    for piece in mode.stream(answerer, AnswerRequest("what does my contract say about termination?")):
        if isinstance(piece, AnswerResult): print(piece.citations)
        elif isinstance(piece, str): print(piece, end="")    # (Grounded also yields AnswerProgress first)

An Answerer is not thread-safe (one model each); the UI and the API serialise answers.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from localrag.backends.base import Backend
from localrag.config import GenerationConfig, GroundedConfig, RasdConfig
from localrag.engine import Engine
from localrag.evidence import EvidenceAligner, EvidenceConfig, split_citations
from localrag.grounded import GroundedPipeline
from localrag.rag.followup import FollowupConfig, search_query
from localrag.rag.index import DocumentIndex
from localrag.rag.records import Hit
from localrag.rasd import RasdDecoder
from localrag.results import (
    ON_UNSUPPORTED,
    AnswerEvidence,
    AnswerResult,
    AnswerStats,
    ChunkLike,
    CopiedSpan,
    GroundedDraft,
    RetrievalStats,
)

RAG_INSTRUCTIONS = (
    "Answer the question using only the numbered sources below. Be brief and specific. "
    "If the sources do not contain the answer, say that the documents do not say."
)
NO_DOCS_INSTRUCTIONS = "You are a helpful assistant. Be brief. There are no documents to search."


def sources_block(hits: Sequence[Hit]) -> str:
    """Numbered sources for a prompt: ``[1] (label) text``."""
    return "\n\n".join(f"[{i}] ({h.citation()}) {h.text.strip()}" for i, h in enumerate(hits, start=1))


def rag_messages(question: str, hits: Sequence[Hit], history: Sequence[dict],
                 instructions: str = RAG_INSTRUCTIONS) -> list[dict]:
    """Standard-RAG chat messages: sources in the system turn, then history, then the question."""
    system = f"{instructions}\n\nSources:\n{sources_block(hits)}" if hits else NO_DOCS_INSTRUCTIONS
    msgs = [{"role": "system", "content": system}]
    msgs += [{"role": m["role"], "content": m["content"]} for m in history if m.get("role") in ("user", "assistant")]
    msgs.append({"role": "user", "content": question})
    return msgs


def unsupported_reason(evidence: AnswerEvidence | None) -> str:
    """Why the documents do not support an answer, in words."""
    if evidence is None or not evidence.sentences:
        return "no answer was written"
    if not evidence.cited:
        return "nothing in the answer was found in them"
    return f"its support {evidence.score:.3f} is below the calibrated threshold {evidence.threshold:.3f}"


def refusal_message(why: str, searched: str) -> str:
    return f"Your documents do not support an answer to this question ({why}).\nWhat was searched: {searched}"


def apply_policy(result: AnswerResult, on_unsupported: str, why: str = "") -> AnswerResult:
    """What an answer the documents do not support gets: "warn" shows it with a warning, "refuse"
    shows a refusal instead (saying what was searched) and keeps the text, labelled unsupported;
    without any text (nothing was retrieved, every draft declined) there is only the refusal.
    ``why``: the mode's own reason (Grounded: no draft passed its verifier); default: the evidence's."""
    if on_unsupported not in ON_UNSUPPORTED:
        raise ValueError(f"on_unsupported must be one of {', '.join(ON_UNSUPPORTED)}, not {on_unsupported!r}")
    result.on_unsupported = on_unsupported
    if not result.supported and (on_unsupported == "refuse" or not result.text.strip()):  # nothing to warn about
        result.refusal = refusal_message(why or unsupported_reason(result.evidence), result.searched)
    return result


def checked_result(text: str, mode: str, evidence: AnswerEvidence, retrieved: Sequence[ChunkLike], stats: AnswerStats,
                   searched: str, on_unsupported: str, drafts: Sequence[GroundedDraft] = ()) -> AnswerResult:
    """The AnswerResult of a checked answer: the citations are the chunks its evidence cites, in order
    of first use; the other retrieved chunks are listed apart (also searched); the policy decides
    what an unsupported answer gets (``apply_policy``)."""
    citations, also = split_citations(evidence, retrieved)
    result = AnswerResult(text=text, mode=mode, citations=citations, supported=evidence.supported, stats=stats,
                          searched=searched, drafts=list(drafts), also_searched=also, evidence=evidence)
    return apply_policy(result, on_unsupported)


@dataclass
class Retrieval:
    """The chunks found for one question, and how they were found."""

    hits: list[Hit]
    searched: str  # in words: what was searched, where, and how much was found
    stats: RetrievalStats


@dataclass
class RasdState:
    """Where the Speedup decoder lives between answers. What it learns (acceptance calibration,
    the draft bandit, the probe schedule) carries over to the next answer: give every Answerer of
    one (model, draft) pair the same RasdState."""

    decoder: RasdDecoder | None = None


@dataclass
class Answerer:
    """The models and indexes one answer needs.

    engine: the target model. index: the default collection's index (None: answer without
    documents). verifier: Grounded mode's verifier (default: the engine scores its own drafts).
    rasd_draft: the Speedup draft model (same vocabulary as the engine), or None.
    """

    engine: Engine
    index: DocumentIndex | None
    verifier: Engine | None = None
    rasd_draft: Backend | None = None
    rasd_config: RasdConfig = field(default_factory=RasdConfig)
    grounded_config: GroundedConfig = field(default_factory=GroundedConfig)
    instructions: str = RAG_INSTRUCTIONS
    rasd_state: RasdState = field(default_factory=RasdState)
    evidence_config: EvidenceConfig = field(default_factory=EvidenceConfig)
    followup: FollowupConfig = field(default_factory=FollowupConfig)
    aligner: EvidenceAligner | None = None  # made on first use with the index's embedder; share one across answers
    _indexes: dict[str, DocumentIndex] = field(default_factory=dict, repr=False)
    _pipeline: GroundedPipeline | None = field(default=None, repr=False)

    # ------------------------------------------------------------ retrieval
    def index_for(self, collection: str | None) -> DocumentIndex | None:
        """The index of ``collection`` (sharing the loaded embedder), or the default one."""
        if self.index is None or collection is None or collection == self.index.config.collection:
            return self.index
        if collection not in self._indexes:
            self._indexes[collection] = DocumentIndex(self.index.config.with_(collection=collection),
                                                      embedder=self.index.embedder)
        return self._indexes[collection]

    def search_query(self, question: str, history: Sequence[dict]) -> str:
        """What to search for ``question`` asked after ``history``: the question, with the earlier
        questions' key terms when it follows up on them (``localrag.rag.followup``)."""
        return search_query(question, history, self.followup)

    def retrieve(self, query: str, k: int, collection: str | None = None) -> Retrieval:
        """The top ``k`` chunks for ``query`` (a question, or a follow-up's ``search_query``)."""
        index = self.index_for(collection)
        t0 = time.perf_counter()
        if index is None:
            return Retrieval([], f'no document index: "{query}" was not searched; answered without documents',
                             RetrievalStats(query=query, k=k, note="no index"))
        name = index.config.collection
        hits = index.search(query, k)
        searched = f'searched "{query}" in collection "{name}" (top {k}): {len(hits)} chunks found'
        note = "" if hits else "the index is empty or nothing matched; answered without documents"
        stats = RetrievalStats(query=query, collection=name, k=k, n_chunks=len(hits),
                               seconds=time.perf_counter() - t0, note=note)
        return Retrieval(hits, searched, stats)

    # ------------------------------------------------------------ prompts and decoders
    def fit_messages(self, msgs: list[dict], gen: GenerationConfig) -> list[dict]:
        """Drop the oldest history turns until prompt + max_tokens fits the context window."""
        budget = self.engine.backend.n_ctx - gen.max_tokens - 8
        msgs = list(msgs)
        while len(msgs) > 2 and len(self.engine.encode_prompt(self.engine.prompt.render(msgs))) > budget:
            del msgs[1]  # oldest history turn (index 0 is the system turn)
        return msgs

    def rasd_decoder(self, documents: Sequence[str]) -> RasdDecoder:
        """The Speedup decoder (built once per RasdState), its datastore holding `documents`."""
        if self.rasd_state.decoder is None:
            self.rasd_state.decoder = RasdDecoder(self.engine.backend, self.rasd_config, draft=self.rasd_draft)
        self.rasd_state.decoder.set_documents(documents)
        return self.rasd_state.decoder

    # ------------------------------------------------------------ the check
    def evidence_aligner(self) -> EvidenceAligner:
        """The aligner every mode checks its answers with, on the index's already-loaded embedder."""
        if self.aligner is None:
            embedder = self.index.embedder if self.index is not None else None
            self.aligner = EvidenceAligner(embedder, config=self.evidence_config)
        return self.aligner

    def check(self, text: str, question: str, chunks: Sequence[ChunkLike],
              copied: Sequence[CopiedSpan] = ()) -> AnswerEvidence:
        """The sentence-level evidence of ``text`` in the chunks it was written from. ``copied``: the
        spans the decoder copied from them (Speedup), checked against the alignment and kept with it."""
        return self.evidence_aligner().align(text, chunks, question=question, copied=copied)

    @property
    def grounded_pipeline(self) -> GroundedPipeline:
        if self._pipeline is None:
            self._pipeline = GroundedPipeline(self.engine, self.verifier or self.engine, self.grounded_config,
                                              aligner=self.evidence_aligner())
        return self._pipeline
