"""Grounded mode (Speculative RAG): a small drafter writes answers-with-rationale from chunk subsets,
the larger verifier scores them, and the answer model writes its own answer over all the chunks;
the answer model's answer when the documents support it, else a supported draft another candidate
agrees with, else an honest "your documents do not support an answer" (its default: refuse rather
than warn; ``GroundedPipeline.decide``). The paper's split: a specialist drafter, a generalist verifier.
By default the drafter is the registry's draft model for the loaded target (the 0.5B for the Qwen
1.5B; one vocabulary) and the verifier is the loaded target itself. On a serving engine, the drafts
are concurrent requests to it and the verifier's scores are what it returns (``grounded.remote``)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace

from localrag.answer import DECLINED, Answerer, apply_policy
from localrag.config import ModelConfig
from localrag.engine import Engine
from localrag.evidence import foreign_words, unsupported_reason
from localrag.grounded import GroundedPipeline, drafter_problem
from localrag.grounded.extras import ANSWER_MODEL, GroundedDraft, GroundedExtras
from localrag.grounded.remote import RemoteGroundedPipeline
from localrag.modes.base import AnswerMode, AnswerRequest, ModeOptions, option
from localrag.modes.plain import PlainMode, PlainOptions
from localrag.results import AnswerProgress, AnswerResult

AUTO, TARGET = "auto", "target"


@dataclass(frozen=True)
class GroundedOptions(ModeOptions):
    k: int = option(5, "chunks the answer model reads for its own answer (as Plain's k)", int)
    n: int = option(10, "chunks retrieved for the drafts (before the relevance gate)", int)
    clusters: int = option(2, "k-means clusters of the retrieved chunks = chunks per draft", int)
    drafts: int = option(5, "drafts written, each from its own subset of the chunks", int)
    drafter: str = option(AUTO, "the model that writes the drafts: auto = the registry's draft model for the "
                                "loaded one (else the loaded one), target = the loaded one, or a name/path")
    verifier: str = option(TARGET, "the model that scores the drafts (any vocabulary): target = the loaded one, "
                                   "or a name/path")

    def validate(self) -> None:
        super().validate()
        for name in ("k", "n", "clusters", "drafts"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, not {getattr(self, name)}")
        if self.clusters > self.n:
            raise ValueError(f"clusters ({self.clusters}) cannot exceed the chunks retrieved (n={self.n})")


class GroundedMode(AnswerMode):
    id = "grounded"
    label = "Grounded (Speculative RAG)"
    aliases = ("specrag",)
    summary = ("the answer model's own answer over the chunks beside drafts from chunk subsets scored by a "
               "verifier; shows a candidate only when the documents support it, else refuses. Slower than "
               "Plain: the drafts come on top of Plain's answer (about 2x Plain's time on a 2-core CPU)")
    on_unsupported = "refuse"
    options_type = GroundedOptions

    def available(self, answerer: Answerer | None) -> tuple[bool, str]:
        if answerer is None:
            return False, "no model is loaded"
        if answerer.remote:  # the drafts become concurrent requests (grounded.remote)
            return True, ""
        why = drafter_problem(answerer.engine)
        return (False, why) if why else (True, "")

    def refuses(self, request: AnswerRequest) -> str:
        return "" if request.documents else "Grounded mode answers from documents: give a collection"

    def pipeline(self, answerer: Answerer, opts: GroundedOptions) -> GroundedPipeline:
        """The pipeline of (drafter, verifier, settings), made once per answerer. On a serving engine
        both are the endpoint's model, and the drafts are concurrent requests."""
        if answerer.remote:
            cfg = answerer.config.grounded.with_(n=opts.n, k=opts.clusters, m=opts.drafts)
            return answerer.runtime((self.id, "endpoint", cfg), lambda: RemoteGroundedPipeline(
                answerer.engine, cfg, aligner=answerer.evidence_aligner()))
        drafter = self._engine(answerer, opts.drafter, answerer.models.default_draft() if opts.drafter == AUTO else None)
        verifier = self._engine(answerer, opts.verifier, None, verify=True)
        cfg = answerer.config.grounded.with_(n=opts.n, k=opts.clusters, m=opts.drafts)
        key = (self.id, drafter.model_name, verifier.model_name, cfg)
        return answerer.runtime(key, lambda: GroundedPipeline(drafter, verifier, cfg,
                                                              aligner=answerer.evidence_aligner()))

    @staticmethod
    def _engine(answerer: Answerer, name: str, auto: str | None, verify: bool = False) -> Engine:
        """The drafter or verifier engine: ``auto``/``target`` resolve to the registry's pairing or
        the loaded target; the verifier gets a batch that holds every draft's scoring input."""
        if name in (AUTO, TARGET):
            name = auto or answerer.engine.model_name
        base = answerer.engine.backend.config
        cfg = ModelConfig(model=name, n_ctx=base.n_ctx, n_batch=1024 if verify else base.n_batch,
                          n_gpu_layers=base.n_gpu_layers, n_threads=base.n_threads)
        return answerer.models.engine(name, cfg)

    def stream(self, answerer: Answerer, request: AnswerRequest) -> Iterator[str | AnswerProgress | AnswerResult]:
        """AnswerProgress while it searches, drafts (k of m done) and reads; then the answer model's own
        answer as it is written; then the AnswerResult: that answer, a draft, or a refusal."""
        opts = self.options_of(request)
        yield from self.answer_with(answerer, self.pipeline(answerer, opts), request, opts)

    def answer_with(self, answerer: Answerer, pipeline: GroundedPipeline, request: AnswerRequest,
                    opts: GroundedOptions | None = None) -> Iterator[str | AnswerProgress | AnswerResult]:
        """``stream`` with a given pipeline (the benchmarks build their own). The drafts come first,
        each from its subset of the relevant chunks; nothing relevant found means a refusal before
        any answer is written. Then the answer model writes its own answer over the top-k chunks as
        Plain does, streamed, checked against them; ``GroundedPipeline.decide`` picks the answer."""
        opts = opts or self.options_of(request)
        index = answerer.index_for(request.collection)
        query = answerer.search_query(request.question, request.history)
        drafted = yield from pipeline.draft(request.question, index, gen=request.gen, query=query)
        own, own_result = None, None
        if drafted.hits and not request.cancelled:
            own_request = replace(request, options=PlainOptions(k=opts.k, on_unsupported="warn"))
            for item in MODES_PLAIN.stream(answerer, own_request):
                if isinstance(item, AnswerResult):
                    own_result = item
                else:
                    yield item
            own = own_candidate(request.question, own_result)
        result = pipeline.decide(request.question, drafted, own, own_result)
        why = result.extras.unsupported_reason if isinstance(result.extras, GroundedExtras) else ""
        yield apply_policy(result, self.policy(request), why)


MODES_PLAIN = PlainMode()


def own_candidate(question: str, result: AnswerResult) -> GroundedDraft:
    """The answer model's own answer as a Grounded candidate: its mean log-probability is the paper's
    length-normalised draft term; its check is Plain's evidence check (and no number, name or unit
    found in no chunk)."""
    gen = result.stats.generation if result.stats is not None else None
    n = gen.generated_tokens if gen is not None else 0
    mean = gen.mean_logprob if gen is not None and gen.mean_logprob is not None else float("nan")
    chunks = [c.text for c in (*result.citations, *result.also_searched)]
    foreign = foreign_words(result.text, chunks, question)
    check = (f'"{foreign[0]}" is in no document' if foreign
             else "" if result.supported else unsupported_reason(result.evidence) if result.text else DECLINED)
    return GroundedDraft(answer=result.text, rationale="", citations=list(result.citations),
                         draft_logprob=mean * n, reflection=float("nan"), score=mean, n_draft_tokens=n,
                         origin=ANSWER_MODEL, check=check)
