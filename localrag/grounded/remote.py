"""Grounded mode on a serving engine: the drafts as concurrent requests, scored from what the
server returns.

Speculative RAG's own setting: the paper ran its drafts in parallel on vLLM, which batches them.
Here every subset's draft is chat requests sent at once, so a batching server (vLLM, llama-server
with several slots) computes them together. A draft is written as the in-process drafter writes
it (``localrag.grounded.drafting``), in two requests that continue the drafter's own reply:

1. the rationale: the reply begins "Rationale:" (a final assistant message the server continues)
   and ends at a line break or "Answer" (stop strings) or at its token limit, where it is cut back
   to its last sentence end (``rationale_end``, over the tokens the server sent back);
2. the answer: the reply continues "Rationale: <that>\\nAnswer:" and ends at a line break or its
   first sentence end; one that reaches the answer's token limit first is incomplete (dropped).

A server continues a final assistant message itself (llama-server: ``--prefill-assistant``, its
default) or when asked (vLLM: ``continue_final_message``, sent with every draft request). The
verifier's part is what an OpenAI-compatible server can give:

- the draft score, the mean log-probability of the draft's own tokens, when the server returns
  ``logprobs`` for generated tokens (llama-server and vLLM do);
- self-reflection, log p("Yes") as the first token of a reply to the reflection question, from
  the same ``top_logprobs``;
- the same terms as in-process (``grounded.scoring``); ``GroundedExtras.scoring`` says which of
  them the server's replies held.

Everything else (retrieval, subsets, selection, the evidence check, refusal) is the local
pipeline's (``GroundedPipeline``).

    pipe = RemoteGroundedPipeline(EndpointEngine(EndpointConfig(url)), GroundedConfig(), aligner)
    result = pipe.answer(question, index)
"""

from __future__ import annotations

import functools
import math
import re
import time
from collections.abc import Generator, Sequence
from dataclasses import dataclass

from localrag.backends.endpoint import EndpointEngine, EndpointGeneration, TokenLogprob
from localrag.config import GenerationConfig, GroundedConfig
from localrag.evidence import EvidenceAligner
from localrag.grounded.drafting import draft_messages, ends_sentence, rationale_end, shown_rationale
from localrag.grounded.extras import GroundedDraft, GroundedExtras
from localrag.grounded.pipeline import GroundedPipeline, dropped_because
from localrag.grounded.scoring import combined_score, short_answer, verifier_text
from localrag.rag.records import Hit
from localrag.results import AnswerProgress, Citation

RATIONALE, ANSWER = "Rationale:", "\nAnswer:"  # how a draft's two parts begin, as the in-process drafter writes them
# vLLM's fields for "continue the final assistant message"; llama-server does so by itself and ignores them
CONTINUE = {"continue_final_message": True, "add_generation_prompt": False}
NO_YES = math.log(1e-4)  # log p("Yes") when "Yes" is not among the top alternatives at all


@dataclass(frozen=True)
class RemoteDraft:
    """One draft as a server wrote it: its tokens as sent back (with their log-probabilities),
    ``rationale_next`` and ``ended`` as in ``DrafterOutput``."""

    rationale: tuple[TokenLogprob, ...]
    rationale_next: str
    answer: tuple[TokenLogprob, ...]
    ended: str

    @property
    def rationale_text(self) -> str:
        return _text(self.rationale)

    @property
    def answer_text(self) -> str:
        return _text(self.answer)

    @property
    def logprobs(self) -> list[float]:
        return [t.logprob for t in self.rationale + self.answer if math.isfinite(t.logprob)]


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
        yield AnswerProgress("drafting", 0, len(conversations))
        # 1. the rationales (max_tokens: the piece after twice the limit shows where a cut one ends)
        said = gen.with_(max_tokens=2 * cfg.rationale_tokens + 1, temperature=0.0, stop=("\n", "Answer"))
        firsts = [_continue(engine, c, RATIONALE, said) for c in conversations]
        list(engine.concurrently([g.run for g in firsts]))
        rationales = [_rationale(_tokens(g, RATIONALE), cfg.rationale_tokens) for g in firsts]
        # 2. the answers, each after its rationale (max_tokens: one more shows that an answer ended)
        said = gen.with_(max_tokens=gen.max_tokens + 1, temperature=0.0, stop=("\n",))
        prefills = [RATIONALE + _text(r) + ANSWER for r, _ in rationales]
        seconds = [_continue(engine, c, p, said) for c, p in zip(conversations, prefills, strict=True)]
        for done, _ in enumerate(engine.concurrently([g.run for g in seconds]), start=1):
            yield AnswerProgress("drafting", done, len(seconds))
        drafts = [RemoteDraft(r, nxt, *_answer(_tokens(g, p), g.finish_reason == "stop", gen.max_tokens))
                  for (r, nxt), g, p in zip(rationales, seconds, prefills, strict=True)]
        gs.draft_s = time.perf_counter() - t
        yield AnswerProgress("verifying")
        t = time.perf_counter()
        shown = [shown_rationale(d.rationale_text, d.rationale_next) for d in drafts]
        reflections = ([None] * len(drafts) if not cfg.use_verifier else
                       self._reflections(engine, question, [(r, d.answer_text.strip()) if d.answer_text.strip()
                                                            else None for d, r in zip(drafts, shown, strict=True)], cfg))
        gs.verify_s = time.perf_counter() - t
        have_logprobs = any(g.logprobs for g in firsts + seconds)
        have_reflection = any(r is not None for r in reflections)
        gs.scoring = " + ".join(
            [t for t, ok in (("drafter", have_logprobs), ("reflection", have_reflection)) if ok]) or "none"
        return [_scored(d, r, rf, [hits[i] for i in sub], sub, gen)
                for d, r, rf, sub in zip(drafts, shown, reflections, subsets, strict=True)]

    @staticmethod
    def _reflections(engine: EndpointEngine, question: str, parsed: Sequence[tuple[str, str] | None],
                     cfg: GroundedConfig) -> list[float | None]:
        """log p("Yes") per draft (None: no answer to ask about, or the server returns no logprobs)."""
        def ask(draft: tuple[str, str] | None) -> float | None:
            if draft is None:
                return None
            rationale, answer = draft
            prompt = verifier_text(question, answer, rationale, cfg).rstrip("\n")
            got = engine.choice_logprobs([{"role": "user", "content": prompt}], ("Yes",))
            if got is None:
                return None
            return got["Yes"] if got["Yes"] is not None else NO_YES

        return list(engine.concurrently([functools.partial(ask, draft) for draft in parsed]))


def _continue(engine: EndpointEngine, conversation: list[dict], prefill: str,
              config: GenerationConfig) -> EndpointGeneration:
    """The drafter's reply to ``conversation``, continuing ``prefill`` (a final assistant message)."""
    return engine.chat(conversation + [{"role": "assistant", "content": prefill}], config, top_logprobs=1,
                       extra=CONTINUE)  # (top_logprobs 1: llama-server sends none for 0)


def _text(tokens: Sequence[TokenLogprob]) -> str:
    return "".join(t.token for t in tokens)


def _tokens(g: EndpointGeneration, prefill: str) -> list[TokenLogprob]:
    """A reply's tokens as the server sent them, within its text: a stop string's token is not part
    of it, nor the prefill where a server repeats it. A server that sends no logprobs: its words,
    scored 0."""
    text = g.text
    skip = len(prefill) if text.startswith(prefill) else 0
    if not g.logprobs:
        return [TokenLogprob(w, 0.0) for w in re.findall(r"\s*\S+", text[skip:])]
    sent = _text(g.logprobs)
    at = 0 if skip and sent.startswith(prefill) else skip  # where the tokens begin in the text
    kept = []
    for t in g.logprobs:
        start, at = at, at + len(t.token)
        if at > len(text):
            break
        if start >= skip:
            kept.append(t)
    return kept


def _rationale(tokens: list[TokenLogprob], limit: int) -> tuple[tuple[TokenLogprob, ...], str]:
    """(the rationale's tokens, the piece after it when its limit cut it mid-sentence, else ''):
    ``rationale_end`` asked at every length from the limit on, as the in-process drafter asks it
    before each next token. Shorter, it ended on its own (a stop string or the end of text)."""
    pieces = [t.token for t in tokens]
    for size in range(limit, len(pieces)):
        end = rationale_end(pieces[:size + 1], limit)
        if end is not None:
            keep, cut = end
            return tuple(tokens[:keep]), (pieces[size] if cut else "")
    return tuple(tokens), ""


def _answer(tokens: list[TokenLogprob], stopped: bool, limit: int) -> tuple[tuple[TokenLogprob, ...], str]:
    """(the answer's tokens, how it ended): at its first sentence end before the next word, or where
    the server stopped (a line break or the end of text); "limit" when ``limit`` tokens came first."""
    text = ""
    for i, t in enumerate(tokens):
        if text and t.token[:1].isspace() and ends_sentence(text):
            return tuple(tokens[:i]), "sentence"
        if i >= limit:
            return tuple(tokens[:i]), "limit"
        text += t.token
    return tuple(tokens), "eog" if stopped else "limit"


def _scored(d: RemoteDraft, rationale: str, reflection: float | None, hits: list[Hit], subset: Sequence[int],
            gen: GenerationConfig) -> GroundedDraft:
    """One draft with its scores, combined as in-process (``scoring.combined_score``)."""
    lps = d.logprobs
    score = combined_score(sum(lps), len(lps), reflection)
    return GroundedDraft(answer=short_answer(d.answer_text), rationale=rationale,
                         citations=[Citation.from_hit(h) for h in hits], draft_logprob=sum(lps),
                         reflection=reflection or 0.0, score=score,
                         n_draft_tokens=len(d.rationale) + len(d.answer), subset=tuple(subset),
                         dropped=dropped_because(d.ended, gen.max_tokens))
