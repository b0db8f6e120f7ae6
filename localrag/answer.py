"""The answer layer's shared core: the loaded models, the document indexes, retrieval, and the
standard-RAG prompt. Answering modes (``localrag.modes``) run on top of one ``Answerer``:

    answerer = Answerer(Engine.load(ModelConfig()), DocumentIndex(IndexConfig()))
    mode = get_mode("plain")                       # localrag.modes: plain | rasd | grounded
    for piece in mode.stream(answerer, AnswerRequest("what does my contract say about termination?")):
        if isinstance(piece, AnswerResult): print(piece.citations)
        else: print(piece, end="")

An Answerer is not thread-safe (one model each); the UI and the API serialise answers.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from localrag.backends.base import Backend
from localrag.config import GenerationConfig, GroundedConfig, RasdConfig
from localrag.engine import Engine
from localrag.grounded import GroundedPipeline
from localrag.rag.index import DocumentIndex
from localrag.rag.records import Hit
from localrag.rasd import RasdDecoder
from localrag.results import RetrievalStats

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

    def retrieve(self, question: str, k: int, collection: str | None = None) -> Retrieval:
        index = self.index_for(collection)
        t0 = time.perf_counter()
        if index is None:
            return Retrieval([], f'no document index: answered "{question}" without documents',
                             RetrievalStats(query=question, k=k, note="no index"))
        name = index.config.collection
        hits = index.search(question, k)
        searched = f'searched "{question}" in collection "{name}" (top {k}): {len(hits)} chunks found'
        note = "" if hits else "the index is empty or nothing matched; answered without documents"
        stats = RetrievalStats(query=question, collection=name, k=k, n_chunks=len(hits),
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

    @property
    def grounded_pipeline(self) -> GroundedPipeline:
        if self._pipeline is None:
            self._pipeline = GroundedPipeline(self.engine, self.verifier or self.engine, self.grounded_config)
        return self._pipeline
