"""The answer layer shared by the CLI ``ask`` and the UI: question in, grounded answer out.

Three modes over one document index:

- ``plain``   standard RAG: the top-k chunks stuffed into one prompt, plain decoding.
- ``rasd``    the same prompt, decoded with the RASD speedup (lossless; the retrieved
              chunk texts and the conversation feed its token datastore).
- ``specrag`` Speculative RAG (:mod:`localrag.specrag`): drafts from chunk subsets,
              verifier scoring, citations of the winning subset, or an honest
              "the documents don't answer this".

    answerer = Answerer(Engine.load(ModelConfig()), DocumentIndex(IndexConfig()),
                        verifier=Engine.load(ModelConfig(model="gemma3-270m")))
    for piece in answerer.stream("what does my contract say about termination?", [], "plain",
                                 GenerationConfig(max_tokens=200)):
        if isinstance(piece, AnswerResult): print(piece.citations)
        else: print(piece, end="")

``stream`` yields text pieces, then exactly one :class:`AnswerResult` last.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from localrag.config import GenerationConfig, SpecRagConfig

if TYPE_CHECKING:
    from localrag.engine import Engine
    from localrag.rag.index import DocumentIndex

MODES = ("plain", "rasd", "specrag")

RAG_INSTRUCTIONS = (
    "Answer the question using only the numbered sources below. Be brief and specific. "
    "If the sources do not contain the answer, say that the documents do not say."
)
NO_DOCS_INSTRUCTIONS = "You are a helpful assistant. Be brief. There are no documents to search."


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
    def from_hit(cls, hit: Any) -> Citation:
        """From a :class:`localrag.rag.records.Hit` (or anything with the same fields)."""
        return cls(file=hit.file, page=hit.page, line_start=hit.line_start, line_end=hit.line_end,
                   snippet=hit.snippet(), text=hit.text, chunk_id=hit.chunk_id, label=hit.citation())

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class Draft:
    """One Speculative RAG draft and its scores (all natural-log, see :mod:`localrag.specrag`).

    draft_logprob: log P(rationale) + log P(answer | rationale) under the drafter (sum over tokens).
    consistency: verifier's sum of log p over the answer + rationale tokens.
    reflection: verifier's log p("Yes") after the self-reflection question.
    score: the length-normalised combination used for selection.
    """

    answer: str
    rationale: str
    citations: list[Citation]
    draft_logprob: float
    consistency: float
    reflection: float
    score: float
    n_draft_tokens: int = 0
    n_verify_tokens: int = 0
    subset: tuple[int, ...] = ()  # indices into the retrieved chunks

    def to_dict(self) -> dict:
        d = asdict(self)
        d["subset"] = list(self.subset)
        return d


@dataclass
class AnswerResult:
    text: str
    mode: str
    citations: list[Citation]
    supported: bool
    drafts: list[Draft]
    stats: dict
    searched: str  # what was searched (query, collection, k)

    def to_dict(self) -> dict:
        return {"text": self.text, "mode": self.mode, "supported": self.supported, "searched": self.searched,
                "citations": [c.to_dict() for c in self.citations], "drafts": [d.to_dict() for d in self.drafts],
                "stats": self.stats}


def sources_block(hits: Sequence[Any]) -> str:
    """Numbered sources for a prompt: ``[1] (label) text``."""
    return "\n\n".join(f"[{i}] ({h.citation()}) {h.text.strip()}" for i, h in enumerate(hits, start=1))


def rag_messages(question: str, hits: Sequence[Any], history: Sequence[dict],
                 instructions: str = RAG_INSTRUCTIONS) -> list[dict]:
    """Standard-RAG chat messages: sources in the system turn, then history, then the question."""
    system = f"{instructions}\n\nSources:\n{sources_block(hits)}" if hits else NO_DOCS_INSTRUCTIONS
    msgs = [{"role": "system", "content": system}]
    msgs += [{"role": m["role"], "content": m["content"]} for m in history if m.get("role") in ("user", "assistant")]
    msgs.append({"role": "user", "content": question})
    return msgs


@dataclass
class _Retrieval:
    hits: list
    searched: str
    seconds: float
    collection: str | None
    note: str = ""
    extra: dict = field(default_factory=dict)


class Answerer:
    """Answers questions over one document index with a chosen mode. Not thread-safe (one model each)."""

    def __init__(self, engine: Engine, index: DocumentIndex | None, *, verifier: Engine | None = None,
                 spec_config=None, rasd_draft=None, specrag_config: SpecRagConfig | None = None,
                 instructions: str = RAG_INSTRUCTIONS, rasd_state: dict | None = None):
        """spec_config: the RASD decoder's config (or a SpecRagConfig, accepted for convenience);
        rasd_draft: optional draft model for RASD; verifier: the Speculative RAG verifier engine
        (defaults to ``engine``: the drafter then scores its own drafts); rasd_state: where the RASD
        decoder lives between answers, so what it learned carries over (acceptance calibration, the
        draft bandit, the probe schedule): pass the same dict to every Answerer of one (model,
        draft) pair (default: one per Answerer)."""
        if isinstance(spec_config, SpecRagConfig):
            specrag_config, spec_config = spec_config, None
        self.engine = engine
        self.index = index
        self.verifier = verifier
        self.spec_config = spec_config
        self.rasd_draft = rasd_draft
        self.specrag_config = specrag_config or SpecRagConfig()
        self.instructions = instructions
        self.rasd_state = {} if rasd_state is None else rasd_state
        self._indexes: dict[str, Any] = {}
        self._pipeline = None

    # ------------------------------------------------------------ retrieval
    def index_for(self, collection: str | None):
        """The index of ``collection`` (sharing the loaded embedder), or the default one."""
        if self.index is None or collection is None or collection == self.index.config.collection:
            return self.index
        if collection not in self._indexes:
            from localrag.rag.index import DocumentIndex

            self._indexes[collection] = DocumentIndex(self.index.config.with_(collection=collection),
                                                      embedder=self.index.embedder)
        return self._indexes[collection]

    def retrieve(self, question: str, k: int, collection: str | None = None) -> _Retrieval:
        index = self.index_for(collection)
        t0 = time.perf_counter()
        if index is None:
            return _Retrieval([], f'no document index: answered "{question}" without documents', 0.0, None,
                              note="no index")
        name = index.config.collection
        hits = index.search(question, k)
        searched = f'searched "{question}" in collection "{name}" (top {k}): {len(hits)} chunks found'
        note = "" if hits else "the index is empty or nothing matched; answered without documents"
        return _Retrieval(hits, searched, time.perf_counter() - t0, name, note=note)

    # ------------------------------------------------------------ answering
    def stream(self, question: str, history: list[dict], mode: str, gen: GenerationConfig, k: int = 5,
               collection: str | None = None) -> Iterator[str | AnswerResult]:
        """Yields text pieces as they stream, then exactly one AnswerResult last."""
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; choose one of {', '.join(MODES)}")
        if mode == "specrag":
            yield from self._stream_specrag(question, history, gen, collection)
            return
        t0 = time.perf_counter()
        got = self.retrieve(question, k, collection)
        decoder_args: dict = {}
        rasd_setup = 0.0
        msgs = self.fit_messages(rag_messages(question, got.hits, history, self.instructions), gen)
        if mode == "rasd":
            t1 = time.perf_counter()
            decoder_args = self._rasd_decoder(question, got.hits, history)
            rasd_setup = time.perf_counter() - t1
        generation = self.engine.chat(msgs, gen, **decoder_args)
        yield from generation
        gstats = generation.stats.to_dict()
        stats = {"retrieve_s": got.seconds, "rasd_setup_s": rasd_setup, "prefill_s": gstats["prefill_seconds"],
                 "decode_s": gstats["decode_seconds"], "total_s": time.perf_counter() - t0,
                 "n_chunks": len(got.hits), "collection": got.collection, "generation": gstats}
        if got.note:
            stats["note"] = got.note
        yield AnswerResult(text=generation.text.strip(), mode=mode,
                           citations=[Citation.from_hit(h) for h in got.hits], supported=bool(got.hits),
                           drafts=[], stats=stats, searched=got.searched)

    def ask(self, question: str, mode: str = "plain", gen: GenerationConfig | None = None, k: int = 5,
            collection: str | None = None, history: Sequence[dict] = ()) -> AnswerResult:
        """Non-streaming: the final AnswerResult."""
        result = None
        for item in self.stream(question, list(history), mode, gen or GenerationConfig(), k, collection):
            if isinstance(item, AnswerResult):
                result = item
        assert result is not None
        return result

    def fit_messages(self, msgs: list[dict], gen: GenerationConfig) -> list[dict]:
        """Drop the oldest history turns until prompt + max_tokens fits the context window."""
        budget = self.engine.backend.n_ctx - gen.max_tokens - 8
        msgs = list(msgs)
        while len(msgs) > 2 and len(self.engine.encode_prompt(self.engine.prompt.render(msgs))) > budget:
            del msgs[1]  # oldest history turn (index 0 is the system turn)
        return msgs

    def _rasd_decoder(self, question: str, hits: Sequence[Any], history: Sequence[dict]) -> dict:
        try:
            from localrag.spec import make_rasd_decoder
        except ImportError as exc:
            raise RuntimeError(f"rasd mode unavailable: {exc}") from exc
        if "decoder" not in self.rasd_state:
            self.rasd_state["decoder"] = make_rasd_decoder(self.engine.backend, self.spec_config,
                                                           draft=self.rasd_draft)
        decoder, dstats = self.rasd_state["decoder"]
        decoder.set_documents([h.text for h in hits] + [m["content"] for m in history] + [question])
        return {"decoder": decoder, "decoder_stats": dstats}

    # ------------------------------------------------------------ Speculative RAG
    @property
    def pipeline(self):
        if self._pipeline is None:
            from localrag.specrag import SpeculativeRAG

            self._pipeline = SpeculativeRAG(self.engine, self.verifier or self.engine, self.specrag_config)
        return self._pipeline

    def _stream_specrag(self, question: str, history: Sequence[dict], gen: GenerationConfig,
                        collection: str | None) -> Iterator[str | AnswerResult]:
        index = self.index_for(collection)
        result = self.pipeline.answer(question, index, gen=gen)
        yield result.text
        yield result
