"""Grounded mode (Speculative RAG): a small drafter writes answers-with-rationale from chunk subsets,
the larger verifier scores them; the best draft, checked against the chunks it was written from,
with the chunks its evidence cites, or an honest "your documents do not support an answer" (its
default: refuse rather than warn). The paper's split: a specialist drafter, a generalist verifier.
By default the drafter is the registry's draft model for the loaded target (the 0.5B for the Qwen
1.5B; one vocabulary) and the verifier is the loaded target itself. On a serving engine, the drafts
are concurrent requests to it and the verifier's scores are what it returns (``grounded.remote``)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from localrag.answer import Answerer, apply_policy
from localrag.config import ModelConfig
from localrag.engine import Engine
from localrag.grounded import GroundedPipeline, drafter_problem
from localrag.grounded.extras import GroundedExtras
from localrag.grounded.remote import RemoteGroundedPipeline
from localrag.modes.base import AnswerMode, AnswerRequest, ModeOptions, option
from localrag.results import AnswerProgress, AnswerResult

AUTO, TARGET = "auto", "target"


@dataclass(frozen=True)
class GroundedOptions(ModeOptions):
    n: int = option(10, "chunks retrieved (before the relevance gate)", int)
    clusters: int = option(2, "k-means clusters of the retrieved chunks = chunks per draft", int)
    drafts: int = option(5, "drafts written, each from its own subset of the chunks", int)
    drafter: str = option(AUTO, "the model that writes the drafts: auto = the registry's draft model for the "
                                "loaded one (else the loaded one), target = the loaded one, or a name/path")
    verifier: str = option(TARGET, "the model that scores the drafts (any vocabulary): target = the loaded one, "
                                   "or a name/path")

    def validate(self) -> None:
        super().validate()
        for name in ("n", "clusters", "drafts"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, not {getattr(self, name)}")
        if self.clusters > self.n:
            raise ValueError(f"clusters ({self.clusters}) cannot exceed the chunks retrieved (n={self.n})")


class GroundedMode(AnswerMode):
    id = "grounded"
    label = "Grounded (Speculative RAG)"
    aliases = ("specrag",)
    summary = ("drafts from chunk subsets scored by a verifier; refuses when nothing supports an answer. "
               "Only as good as its drafter's best draft: with the bundled pair on a 2-core CPU it answered "
               "in 0.45x Plain's time but reached SQuAD F1 30 against Plain's 70 (bench qa --n 100)")
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
        """AnswerProgress while it searches, drafts (k of m done) and verifies; then the chosen
        answer's text (none when refused) and the AnswerResult."""
        opts = self.options_of(request)
        index = answerer.index_for(request.collection)
        query = answerer.search_query(request.question, request.history)
        pipeline = self.pipeline(answerer, opts)
        for item in pipeline.stream(request.question, index, gen=request.gen, query=query):
            if isinstance(item, AnswerProgress):
                yield item
                continue
            why = item.extras.unsupported_reason if isinstance(item.extras, GroundedExtras) else ""
            result = apply_policy(item, self.policy(request), why)
            if result.text and not result.refused:
                yield result.text
            yield result
