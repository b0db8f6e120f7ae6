"""Grounded mode on a serving engine: the drafts as concurrent requests, scored from what the
server returns.

Speculative RAG's own setting: the paper ran its drafts in parallel on vLLM, which batches them.
Here every subset's draft is one chat request, all sent at once (``EndpointEngine.chat_many``), so a
batching server (vLLM, llama-server with several slots) computes them together. Each reply has the
"Rationale: ...\\nAnswer: ..." form the drafter's example shows; the verifier's part is what an
OpenAI-compatible server can give:

- the draft score, the mean log-probability of the draft's own tokens, when the server returns
  ``logprobs`` for generated tokens (llama-server and vLLM do);
- self-reflection, log p("Yes") as the first token of a reply to the reflection question, from
  the same ``top_logprobs``;
- not self-consistency: it needs the log-probability of a given text (prompt logprobs), which the
  chat API does not return. ``GroundedExtras.scoring`` says which terms the scores hold.

Everything else (retrieval, subsets, selection, the evidence check, refusal) is the local
pipeline's (``GroundedPipeline``).

    pipe = RemoteGroundedPipeline(EndpointEngine(EndpointConfig(url)), GroundedConfig(), aligner)
    result = pipe.answer(question, index)
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Generator, Sequence
from concurrent.futures import ThreadPoolExecutor

from localrag.backends.endpoint import EndpointEngine, EndpointGeneration
from localrag.config import GenerationConfig, GroundedConfig
from localrag.evidence import EvidenceAligner
from localrag.grounded.drafting import draft_messages
from localrag.grounded.extras import GroundedDraft, GroundedExtras
from localrag.grounded.pipeline import LOOPED, GroundedPipeline
from localrag.grounded.scoring import short_answer
from localrag.rag.records import Hit
from localrag.results import AnswerProgress, Citation

_FORM = re.compile(r"^\s*(?:rationale\s*:)?\s*(?P<rationale>.*?)\s*\banswer\s*:\s*(?P<answer>.+)$", re.I | re.S)
TOP_LOGPROBS = 5  # alternatives asked for per token: the draft score needs none, "Yes" may need a few
NO_YES = math.log(1e-4)  # log p("Yes") when "Yes" is not among the top alternatives at all


class RemoteGroundedPipeline(GroundedPipeline):
    """Grounded mode with its drafter and verifier on one OpenAI-compatible endpoint."""

    def __init__(self, engine: EndpointEngine, config: GroundedConfig | None = None,
                 aligner: EvidenceAligner | None = None) -> None:
        self.drafter = self.verifier = engine
        self.config = config or GroundedConfig()
        self.aligner = aligner

    def write_and_score(self, question: str, hits: Sequence[Hit], subsets: Sequence[Sequence[int]],
                        cfg: GroundedConfig, gen: GenerationConfig,
                        gs: GroundedExtras) -> Generator[AnswerProgress, None, list[GroundedDraft]]:
        engine: EndpointEngine = self.drafter
        t = time.perf_counter()
        conversations = [draft_messages(question, [hits[i].text for i in sub], cfg) for sub in subsets]
        limit = gen.with_(max_tokens=cfg.rationale_tokens * 2 + gen.max_tokens, temperature=0.0)
        gens = [engine.chat(msgs, limit, top_logprobs=1) for msgs in conversations]  # (llama-server sends none for 0)
        yield AnswerProgress("drafting", 0, len(gens))
        with ThreadPoolExecutor(max_workers=min(len(gens), engine.config.max_concurrent) or 1) as pool:
            futures = [pool.submit(g.run) for g in gens]
            for done, future in enumerate(futures, start=1):  # (in order: the progress counts up)
                future.result()
                yield AnswerProgress("drafting", done, len(gens))
        gs.draft_s = time.perf_counter() - t
        yield AnswerProgress("verifying")
        t = time.perf_counter()
        parsed = [_parse(g.text) for g in gens]
        reflections = self._reflections(engine, question, parsed, cfg) if cfg.use_verifier else [None] * len(gens)
        gs.verify_s = time.perf_counter() - t
        have_logprobs = any(g.logprobs for g in gens)
        have_reflection = any(r is not None for r in reflections)
        gs.scoring = " + ".join(
            [t for t, ok in (("drafter", have_logprobs), ("reflection", have_reflection)) if ok]) or "none"
        gs.scoring += " (an endpoint returns no log-probabilities of a given text: no consistency term)"
        return [self._draft(g, p, r, [hits[i] for i in sub], sub, gen)
                for g, p, r, sub in zip(gens, parsed, reflections, subsets, strict=True)]

    @staticmethod
    def _reflections(engine: EndpointEngine, question: str, parsed: Sequence[tuple[str, str] | None],
                     cfg: GroundedConfig) -> list[float | None]:
        """log p("Yes") per draft (None: no answer to ask about, or the server returns no logprobs)."""
        def ask(draft: tuple[str, str] | None) -> float | None:
            if draft is None:
                return None
            rationale, answer = draft
            prompt = f"Question: {question}\nAnswer: {answer}\nRationale: {rationale}\n{cfg.reflection_question}"
            got = engine.choice_logprobs([{"role": "user", "content": prompt}], ("Yes",))
            if got is None:
                return None
            return got["Yes"] if got["Yes"] is not None else NO_YES

        with ThreadPoolExecutor(max_workers=min(len(parsed), engine.config.max_concurrent) or 1) as pool:
            return list(pool.map(ask, parsed))

    @staticmethod
    def _draft(g: EndpointGeneration, parsed: tuple[str, str] | None, reflection: float | None, hits: list[Hit],
               subset: Sequence[int], gen: GenerationConfig) -> GroundedDraft:
        """One draft with its scores: mean token log-probability (+ reflection), as the local
        pipeline normalises them (``scoring.combined_score``)."""
        lps = [lp.logprob for lp in g.logprobs or () if math.isfinite(lp.logprob)]
        logprob = sum(lps)
        score = logprob / max(len(lps), 1) + (reflection or 0.0)
        rationale, answer = parsed if parsed is not None else ("", g.text)
        dropped = ""
        if parsed is None:
            dropped = "its reply was empty"
        elif g.finish_reason == "length":
            dropped = f"its answer did not end within {gen.max_tokens} tokens"
        elif g.stats.stop_reason == "repetition":
            dropped = LOOPED
        return GroundedDraft(answer=short_answer(answer), rationale=rationale,
                             citations=[Citation.from_hit(h) for h in hits], draft_logprob=logprob,
                             consistency=0.0, reflection=reflection or 0.0, score=score,
                             n_draft_tokens=g.stats.generated_tokens, n_verify_tokens=0, subset=tuple(subset),
                             dropped=dropped)


def _parse(text: str) -> tuple[str, str] | None:
    """(rationale, answer) of a "Rationale: ...\\nAnswer: ..." reply. A reply without the "Answer:"
    part is its own answer, without a rationale: a chat request cannot force "\\nAnswer:" after the
    rationale as the local drafter does (a cut one is dropped by its finish reason). None: empty."""
    m = _FORM.match(text.strip())
    if m is not None and m.group("answer").strip():
        return " ".join(m.group("rationale").split()), m.group("answer").strip().splitlines()[0].strip()
    lines = re.sub(r"^\s*rationale\s*:", "", text.strip(), flags=re.I).strip().splitlines()
    return ("", lines[0].strip()) if lines else None
