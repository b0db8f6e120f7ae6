"""The answer layer's shared core: what every mode needs, and nothing one mode alone needs.

    answerer = Answerer(Engine.load(ModelConfig()), IndexSet(IndexConfig()))
    mode = get_mode("plain")                       # localrag.modes: plain | speedup | grounded
    for piece in mode.stream(answerer, AnswerRequest("what does my contract say about termination?")):
        if isinstance(piece, AnswerResult): print(piece.citations)
        elif isinstance(piece, str): print(piece, end="")    # (Grounded also yields AnswerProgress first)

Shared: the target (``engine``: a model loaded here, or an OpenAI-compatible serving engine, see
``remote``), the collections' indexes (``indexes``), the models loaded
beside the target by name (``models``: a Speedup draft, a Grounded drafter or verifier), the
document search (``search``, with follow-up queries), the standard-RAG prompt (``rag_messages``) and
the reply to it (``generate``),
and the check every answer goes through before it is shown: its sentence-level evidence in the
chunks it was written from (``check``), the citations computed from that evidence, and honest
refusal when the documents do not support it (``checked_result``, ``apply_policy``). What a mode
keeps between answers (Speedup's decoder, Grounded's pipeline) it makes once through ``runtime``.

An Answerer is not thread-safe (one model each); the app computes every answer on one thread.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TypeVar

from localrag.backends.base import Backend
from localrag.backends.chunk_reuse import (
    ChunkReuse,
    chunk_spans,
    common_prefix,
    model_identity,
    supports_reuse,
    warm_entry,
)
from localrag.backends.endpoint import EndpointEngine, EndpointGeneration
from localrag.backends.kv_store import KVStore
from localrag.config import ChunkCacheConfig, GenerationConfig, GroundedConfig, ModelConfig, RasdConfig
from localrag.engine import Engine
from localrag.evidence import EvidenceAligner, EvidenceConfig, declines, split_citations, unsupported_reason
from localrag.generation import Decoder, Generation
from localrag.judge import Probe, file_sha256, find_probe, judge_hidden, unanswerable_reason
from localrag.models import drafts_for
from localrag.rag.followup import FollowupConfig, search_query
from localrag.rag.index import DocumentIndex
from localrag.rag.indexes import IndexSet
from localrag.rag.records import Hit
from localrag.rasd import load_draft
from localrag.results import (
    ON_UNSUPPORTED,
    AnswerEvidence,
    AnswerResult,
    AnswerStats,
    ChunkLike,
    Citation,
    CopiedSpan,
    Judgement,
    ModeExtras,
    SearchStats,
)

T = TypeVar("T")
# how many earlier turns a follow-up's source order looks back through (``Answerer.find``)
ORDER_TURNS = 4
CONTEXT_MARGIN = 8  # tokens kept free at the end of the context
# The app's prompt, chosen by ``bench prompts`` (variant "brief"): brief sentences, and the refusal
# phrase the model takes up ("say that the documents do not say" got it to decline 4% of unanswerable
# questions; "reply: not in the documents" 43%, at 14% of answerable ones). An answer that only declines
# is shown as a refusal (``checked_result``).
RAG_INSTRUCTIONS = (
    "Answer the question using only the numbered sources below. Be brief and specific. "
    "If the sources do not contain the answer, reply: not in the documents."
)
DECLINED = "the model found no answer in the passages it read"  # why, when the answer only declines
NO_DOCS_INSTRUCTIONS = "You are a helpful assistant. Be brief. There are no documents to search."


class PromptTooLong(ValueError):
    """The conversation alone does not fit the model's context (``tokens`` of ``n_ctx``)."""

    def __init__(self, tokens: int, n_ctx: int) -> None:
        super().__init__(f"the messages are {tokens} tokens; the model's context holds {n_ctx}")
        self.tokens, self.n_ctx = tokens, n_ctx


PREFILLS = ("exact", "reuse")  # how a prompt's chunks are read: exactly, or their KV from a cache


def source_text(hit: Hit) -> str:
    """One source as the prompt lists it, after its number: ``(label) text``."""
    return f"({hit.citation()}) {hit.text.strip()}"


def sources_block(hits: Sequence[Hit]) -> str:
    """Numbered sources for a prompt: ``[1] (label) text``."""
    return "\n\n".join(f"[{i}] {source_text(h)}" for i, h in enumerate(hits, start=1))


def in_order(hits: Sequence[Hit], before: Sequence[str]) -> list[Hit]:
    """``hits`` with those listed in ``before`` (chunk ids) first, in that order, then the rest as they were."""
    rank = {chunk_id: i for i, chunk_id in enumerate(before)}
    kept = sorted((h for h in hits if h.chunk_id in rank), key=lambda h: rank[h.chunk_id])
    return kept + [h for h in hits if h.chunk_id not in rank]


def rag_messages(question: str, hits: Sequence[Hit], history: Sequence[dict],
                 instructions: str = RAG_INSTRUCTIONS) -> list[dict]:
    """Standard-RAG chat messages: sources in the system turn, then history, then the question."""
    system = f"{instructions}\n\nSources:\n{sources_block(hits)}" if hits else NO_DOCS_INSTRUCTIONS
    msgs = [{"role": "system", "content": system}]
    msgs += [{"role": m["role"], "content": m["content"]} for m in history if m.get("role") in ("user", "assistant")]
    msgs.append({"role": "user", "content": question})
    return msgs


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
                   searched: str, on_unsupported: str, extras: ModeExtras | None = None,
                   notes: Sequence[str] = ()) -> AnswerResult:
    """The AnswerResult of a checked answer: the citations are the chunks its evidence cites, in order
    of first use; the other retrieved chunks are listed apart (also searched); the policy decides
    what an unsupported answer gets (``apply_policy``). An answer in which the model only declines
    ("not in the documents.", as the instructions ask) is a refusal in its own words: no text is kept
    to warn about, and the refusal says what was searched."""
    declined = declines(text)
    # a refusal cites nothing: every retrieved chunk was searched
    citations, also = (([], [Citation.from_hit(c) for c in retrieved]) if declined
                       else split_citations(evidence, retrieved))
    result = AnswerResult(text="" if declined else text, mode=mode, citations=citations,
                          supported=evidence.supported and not declined, stats=stats, searched=searched,
                          extras=extras, also_searched=also, evidence=evidence, notes=list(notes))
    return apply_policy(result, on_unsupported, DECLINED if declined else "")


@dataclass
class Judging:
    """Whether the top chunk answers the question, by the answer model's probe on the hidden state
    at the end of the judge's prompt ``tokens`` (``localrag.judge``), read aside after its first
    ``at`` tokens, which the answer's prompt shares (so the rest is all it costs); the evidence
    check alone, named (``why``), where there is no probe."""

    backend: Backend | None  # None: nothing to read (no probe)
    probe: Probe | None
    tokens: Sequence[int] = ()
    at: int = 0
    why: str = ""

    def due(self) -> bool:
        return len(getattr(self.backend, "tokens", ())) >= self.at

    def __call__(self) -> Judgement:
        t0 = time.perf_counter()
        states = self.backend.hidden_states_after(self.at, self.tokens[self.at:]) if self.backend and self.tokens else {}
        return replace(judge_hidden(self.probe, states, self.why), seconds=time.perf_counter() - t0)


def judged_refusal(mode: str, judgement: Judgement, retrieved: Sequence[Hit], stats: AnswerStats, searched: str,
                   notes: Sequence[str] = ()) -> AnswerResult:
    """The answer refused before it was written: the judge read no answer in the prompt."""
    result = AnswerResult(text="", mode=mode, citations=[], supported=False, stats=stats, searched=searched,
                          also_searched=[Citation.from_hit(h) for h in retrieved], notes=list(notes))
    return apply_policy(result, "refuse", unanswerable_reason(judgement))


@dataclass
class Found:
    """What the document search found for one question, and how."""

    hits: list[Hit]
    searched: str  # in words: what was searched, where, and how much was found
    stats: SearchStats


@dataclass(frozen=True)
class AnswerConfig:
    """The settings every answer shares, and the modes' own configs (they reach the modes from the
    app's ``AppConfig``): the decoder's, Grounded's, the evidence check's and the follow-up search's."""

    rasd: RasdConfig = field(default_factory=RasdConfig)
    grounded: GroundedConfig = field(default_factory=GroundedConfig)
    evidence: EvidenceConfig | None = None  # None: the constants fitted for the answer model (EvidenceConfig.for_model)
    followup: FollowupConfig = field(default_factory=FollowupConfig)
    instructions: str = RAG_INSTRUCTIONS
    chunk_cache: ChunkCacheConfig = field(default_factory=ChunkCacheConfig)  # for prefill="reuse"


class ModelHub:
    """The models loaded beside the target, by name, each loaded on first use and kept: a Speedup
    draft (a bare backend, its vocabulary checked against the target's) or a Grounded drafter or
    verifier (an engine with its chat layout). The target itself is never loaded twice: asking for
    its name gives the target. The loaders are injectable (tests use fakes).

    ``default_draft()`` is the registry's draft model for the target (the 0.5B for the Qwen 1.5B),
    or None when the registry pairs none with it."""

    def __init__(self, target: Engine, load_engine: Callable[[ModelConfig], Engine] = Engine.load,
                 load_draft: Callable[[Backend, str], Backend] = load_draft) -> None:
        self.target = target
        self._load_engine = load_engine
        self._load_draft = load_draft
        self._engines: dict[str, Engine] = {}
        self._drafts: dict[str, Backend] = {}

    def default_draft(self) -> str | None:
        if isinstance(self.target, EndpointEngine):  # the registry pairs models loaded here
            return None
        paired = drafts_for(self.target.model_name)
        return paired[0] if paired else None

    def engine(self, name: str, config: ModelConfig | None = None) -> Engine:
        """The engine of model ``name`` (``config``: how to load it; default: like the target)."""
        if name == self.target.model_name:
            return self.target
        if name not in self._engines:
            base = self.target.backend.config
            self._engines[name] = self._load_engine(config or ModelConfig(
                model=name, n_ctx=base.n_ctx, n_gpu_layers=base.n_gpu_layers, n_threads=base.n_threads))
        return self._engines[name]

    def draft(self, name: str) -> Backend:
        """A draft backend for the target (raises ModelError, OSError, ... when it cannot be one)."""
        if name not in self._drafts:
            self._drafts[name] = self._load_draft(self.target.backend, name)
        return self._drafts[name]

    def close(self) -> None:
        for engine in self._engines.values():
            engine.close()
        for backend in self._drafts.values():
            backend.close()
        self._engines.clear()
        self._drafts.clear()


@dataclass
class ChunkReadiness:
    """How many of a collection's chunks a new question would find in the chunk cache (``ready`` of
    ``total``; ``stored``: computed by this warm), and whether the warm gave way (``stopped``) or
    reached the cache's cap (``full``)."""

    total: int = 0
    ready: int = 0
    stored: int = 0
    stopped: bool = False
    full: bool = False  # the cache's cap was reached: the rest are read at question time
    note: str = ""

    @property
    def done(self) -> bool:
        """Nothing more to warm until the documents or the cache change."""
        return not self.stopped and (self.full or self.ready >= self.total)


def engine_probe(engine: Engine | EndpointEngine, instructions: str) -> Probe | None:
    """The answerability probe shipped for the engine's model file and these instructions; None for a
    serving engine or a model without one."""
    spec = None if isinstance(engine, EndpointEngine) else getattr(engine.backend, "model_spec", None)
    if spec is None or spec.format != "gguf":
        return None
    return find_probe(file_sha256(Path(spec.path)), instructions)


class Answerer:
    """What every mode shares: the target, the indexes, the models beside the target, the search,
    the prompt and the check (the module docstring). ``indexes``: every collection's (an IndexSet),
    or one index alone (its collection is the default); None: no documents at all."""

    def __init__(self, engine: Engine | EndpointEngine, indexes: IndexSet | DocumentIndex | None = None,
                 models: ModelHub | None = None, config: AnswerConfig | None = None) -> None:
        self.engine = engine
        self.indexes = IndexSet.of(indexes) if isinstance(indexes, DocumentIndex) else indexes
        self.models = models or ModelHub(engine)
        self.config = config or AnswerConfig()
        self._aligner: EvidenceAligner | None = None
        self._runtimes: dict[tuple, object] = {}
        self._kv_store: KVStore | None = None
        self._identity: str | None = None
        self._probe: tuple[Probe | None] | None = None  # (the probe, or None: no probe), once looked up

    @property
    def remote(self) -> bool:
        """The answer model runs on a serving engine (``EndpointEngine``), not in this process."""
        return isinstance(self.engine, EndpointEngine)

    # ------------------------------------------------------------ a mode's own parts
    def has_runtime(self, key: tuple) -> bool:
        return key in self._runtimes

    def runtime(self, key: tuple, make: Callable[[], T]) -> T:
        """What a mode keeps between answers (``key`` starts with its id), made on first use."""
        if key not in self._runtimes:
            self._runtimes[key] = make()
        return self._runtimes[key]

    # ------------------------------------------------------------ search
    def index_for(self, collection: str | None) -> DocumentIndex | None:
        """The index of ``collection`` (None: the default collection); None without indexes."""
        return self.indexes.get(collection) if self.indexes is not None else None

    def search_query(self, question: str, history: Sequence[dict]) -> str:
        """What to search for ``question`` asked after ``history``: the question, with the earlier
        questions' key terms when it follows up on them (``localrag.rag.followup``)."""
        return search_query(question, history, self.config.followup)

    def search(self, query: str, k: int, collection: str | None = None) -> Found:
        """The top ``k`` chunks for ``query`` (a question, or a follow-up's ``search_query``)."""
        index = self.index_for(collection)
        t0 = time.perf_counter()
        if index is None:
            return Found([], f'no document index: "{query}" was not searched; answered without documents',
                         SearchStats(query=query, k=k, note="no index"))
        name = index.config.collection
        hits = index.search(query, k)
        searched = f'searched "{query}" in collection "{name}" (top {k}): {len(hits)} chunks found'
        note = "" if hits else "the index is empty or nothing matched; answered without documents"
        return Found(hits, searched, SearchStats(query=query, collection=name, k=k, n_chunks=len(hits),
                                                 seconds=time.perf_counter() - t0, note=note))

    def find(self, question: str, history: Sequence[dict], k: int, collection: str | None = None) -> Found:
        """The top ``k`` chunks for ``question`` asked after ``history``, in the order the prompt
        lists them. A first question's are in relevance order. A follow-up's keep the order of the
        previous turn's prompt for the chunks they share with it (first, as they were), then the new
        ones by relevance: when a follow-up or a Regenerate finds the same chunks, its prompt starts
        with the previous turn's prompt and answer token for token, and only the new question is
        read (``backend_sync`` keeps the longest common prefix in the KV cache; the batch-invariant
        kernels make that exact). The order is a function of the conversation and the index alone
        (the earlier turns' searches are re-run, up to ORDER_TURNS back), never of what this
        process answered before, so the same conversation always gets the same prompt."""
        found = self.search(self.search_query(question, history), k, collection)
        before = self._prompt_order(history, k, collection, ORDER_TURNS)
        if before:
            found.hits = in_order(found.hits, before)
        return found

    def _prompt_order(self, history: Sequence[dict], k: int, collection: str | None, depth: int) -> list[str]:
        """The chunk ids the prompt of the last question in ``history`` listed, in its order."""
        asked = [i for i, m in enumerate(history) if m.get("role") == "user"]
        if not asked or depth == 0 or self.index_for(collection) is None:
            return []
        last = asked[-1]
        earlier = history[:last]
        hits = self.search(self.search_query(history[last]["content"], earlier), k, collection).hits
        return [h.chunk_id for h in in_order(hits, self._prompt_order(earlier, k, collection, depth - 1))]

    # ------------------------------------------------------------ prompts
    def rag_messages(self, question: str, hits: Sequence[Hit], history: Sequence[dict]) -> list[dict]:
        """The standard-RAG conversation with this answerer's instructions."""
        return rag_messages(question, hits, history, self.config.instructions)

    def fit_prompt(self, msgs: Sequence[dict], gen: GenerationConfig) -> list[int]:
        """``msgs`` (a system turn first) tokenized, with the oldest history turns dropped until the
        prompt leaves room for ``gen.max_tokens``."""
        msgs = list(msgs)
        budget = self.engine.backend.n_ctx - gen.max_tokens - CONTEXT_MARGIN
        tokens = self.engine.chat_tokens(msgs)
        while len(msgs) > 2 and len(tokens) > budget:
            del msgs[1]  # oldest history turn (index 0 is the system turn)
            tokens = self.engine.chat_tokens(msgs)
        return tokens

    def chat_prompt(self, messages: Sequence[dict], gen: GenerationConfig) -> tuple[list[int], GenerationConfig]:
        """A conversation laid out exactly as given (no sources, no instructions of ours), tokenized
        once, and ``gen`` with its max_tokens capped at the room left; PromptTooLong when the
        messages alone fill the context."""
        tokens = self.engine.chat_tokens([dict(m) for m in messages])
        room = self.engine.backend.n_ctx - len(tokens) - CONTEXT_MARGIN
        if room < 1:
            raise PromptTooLong(len(tokens), self.engine.backend.n_ctx)
        return tokens, gen.with_(max_tokens=min(gen.max_tokens, room))

    def generate(self, messages: Sequence[dict], gen: GenerationConfig, decoder: Decoder | None = None,
                 fit: bool = True, cancel=None, reuse: Sequence[Hit] = ()) -> Generation | EndpointGeneration:
        """The reply to ``messages``, to iterate for its pieces: here, laid out, tokenized and fitted
        to the context (``fit``: oldest history turns dropped; else the conversation as given, or
        PromptTooLong), decoded with ``decoder``; on a serving engine, sent as they are (the server
        lays them out with its own template; ``cancel`` closes the stream). ``reuse``: the chunks
        in the prompt whose KV may come from the chunk cache (the approximate prefill, where the
        backend can: ``can_reuse``); empty: the whole prompt is read exactly."""
        if isinstance(self.engine, EndpointEngine):
            return self.engine.chat(messages, gen, cancel=cancel)
        if fit:
            tokens = self.fit_prompt(messages, gen)
        else:
            tokens, gen = self.chat_prompt(messages, gen)
        plan = self.chunk_reuse(tokens, reuse) if reuse and self.can_reuse else None
        return self.engine.reply(tokens, gen, decoder=decoder, reuse=plan)

    @property
    def can_reuse(self) -> bool:
        """Whether the approximate prefill works here (llama.cpp in this process, a model whose
        positions can be shifted)."""
        return not self.remote and supports_reuse(self.engine.backend)

    def kv_store(self) -> KVStore:
        """The chunk KV cache on disk (``AnswerConfig.chunk_cache``)."""
        if self._kv_store is None:
            cfg = self.config.chunk_cache
            self._kv_store = KVStore(cfg.path, cfg.max_bytes)
        return self._kv_store

    def chunk_reuse(self, tokens: Sequence[int], hits: Sequence[Hit]) -> ChunkReuse:
        """The approximate prefill of prompt ``tokens`` listing ``hits`` (``source_text``)."""
        backend, cfg = self.engine.backend, self.config.chunk_cache
        if self._identity is None:
            self._identity = model_identity(backend)
        spans = chunk_spans(backend, tokens, [(h.chunk_id, source_text(h)) for h in hits])
        return ChunkReuse(self.kv_store(), spans, head=cfg.head, min_tokens=cfg.min_tokens, identity=self._identity)

    def warm_chunks(self, hits: Sequence[Hit], stop: Callable[[], bool] = lambda: False,
                    progress: Callable[[ChunkReadiness], None] | None = None) -> ChunkReadiness:
        """Store the chunk-cache entries of ``hits`` not stored yet, in order, until ``stop()`` or
        until the next one would not fit under the cache's cap without evicting (``full``: a warm
        never pushes out what questions used). Each is stored as a prompt listing it would read it
        (``warm_entry``: the same key and cells as a miss at question time). A chunk too short to be
        cached (read exactly anyway) counts as ready."""
        cfg, be = self.config.chunk_cache, self.engine.backend
        ready = ChunkReadiness(total=len(hits))
        if not self.can_reuse:
            return replace(ready, note="the approximate prefill is not available with this model or engine")
        if self._identity is None:
            self._identity = model_identity(be)
        store = self.kv_store()
        used, last = store.size(), 0
        for hit in hits:
            if stop():
                return replace(ready, stopped=True)
            tokens = self.engine.chat_tokens(self.rag_messages("", [hit], []))
            spans = chunk_spans(be, tokens, [(hit.chunk_id, source_text(hit))])
            if not spans or spans[0].end - spans[0].start < cfg.head + cfg.min_tokens:
                ready.ready += 1
            else:
                if used + last > store.max_bytes:
                    return replace(ready, full=True)
                done, size = warm_entry(be, store, self._identity, tokens, spans[0], cfg.head, stop)
                if done == "stopped":
                    return replace(ready, stopped=True)
                ready.ready += done in ("cached", "stored")
                ready.stored += done == "stored"
                used, last = used + size, max(last, size)
            if progress is not None:
                progress(replace(ready))
        return ready

    # ------------------------------------------------------------ the judge
    def probe(self) -> Probe | None:
        """The answerability probe for the answer model's file and these instructions, if one ships."""
        if self._probe is None:
            self._probe = (engine_probe(self.engine, self.config.instructions),)
        return self._probe[0]

    def judge_prompt(self, question: str, hits: Sequence[Hit], gen: GenerationConfig) -> list[int]:
        """The judge's prompt (``localrag.judge.LAYOUT``): the question's, with its top chunk alone."""
        return self.fit_prompt(self.rag_messages(question, hits[:1], []), gen)

    def judging(self, question: str, hits: Sequence[Hit], history: Sequence[dict], gen: GenerationConfig,
                prompt: Sequence[int]) -> Judging:
        """The judge of an answer whose prompt is ``prompt``: due once the answer's read holds the
        cells the judge's prompt shares with it (the instructions and the top chunk), so a refusal
        need not wait for the other chunks to be read. A follow-up is not judged: the probe was
        fitted on questions alone, and a follow-up's top chunk is often the previous question's."""
        probe = None if self.remote else self.probe()
        why = ("the answer model runs on a serving engine" if self.remote else "" if probe is None else
               "nothing was retrieved" if not hits else
               "a follow-up: the probe judges a conversation's first question" if history else "")
        if probe is None or why:
            return Judging(None, None, why=why)
        tokens = self.judge_prompt(question, hits, gen)
        return Judging(self.engine.backend, probe, tokens, min(common_prefix(prompt, tokens), len(tokens) - 1))

    # ------------------------------------------------------------ the check
    def evidence_aligner(self) -> EvidenceAligner:
        """The aligner every mode checks its answers with, on the indexes' already-loaded embedder."""
        if self._aligner is None:
            embedder = self.indexes.embedder() if self.indexes is not None else None
            config = self.config.evidence or EvidenceConfig.for_model(self.engine.model_name)
            self._aligner = EvidenceAligner(embedder, config=config)
        return self._aligner

    def check(self, text: str, question: str, chunks: Sequence[ChunkLike],
              copied: Sequence[CopiedSpan] = (), confidence: float | None = None,
              answerable: float | None = None) -> AnswerEvidence:
        """The sentence-level evidence of ``text`` in the chunks it was written from. ``copied``: the
        spans the decoder copied from them (Speedup), checked against the alignment and kept with it;
        ``confidence``: the answer model's mean log-probability of what it wrote
        (``GenerationStats.mean_logprob``); ``answerable``: the judge's p(answerable) of the question."""
        return self.evidence_aligner().align(text, chunks, question=question, copied=copied, confidence=confidence,
                                             answerable=answerable)

    def close(self) -> None:
        """Close the models loaded beside the target (the target and the indexes belong to the caller)."""
        self.models.close()
