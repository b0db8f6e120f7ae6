"""Speculative RAG on real models: score arithmetic by hand, concurrent == sequential drafting,
the unsupported-answer path, and citations of the chunks actually used.

Drafter: bundled SmolLM2-135M-Instruct; verifier: bundled Gemma-3-270M (another vocabulary).
Run: HF_HUB_OFFLINE=1 .venv/bin/python -m pytest tests/grounded/test_pipeline.py -q
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from localrag.answer import apply_policy
from localrag.config import GenerationConfig, GroundedConfig
from localrag.evidence import EvidenceAligner, is_refusal
from localrag.grounded.drafting import SpanCopy, chunk_tokens, draft_messages, draft_prompt, write_drafts
from localrag.grounded.pipeline import GroundedPipeline, retrieve
from localrag.grounded.scoring import score_drafts, verifier_tokens

pytestmark = pytest.mark.slow

CFG = GroundedConfig(rationale_tokens=16, m=3)
NOTICE_Q = "How many days of notice are needed to terminate the agreement?"


def _logsoftmax(row: np.ndarray) -> np.ndarray:
    r = row.astype(np.float64)
    return r - r.max() - np.log(np.exp(r - r.max()).sum())


def _prompts(drafter, corpus_texts: list[str]) -> list[list[int]]:
    return [draft_prompt(drafter, NOTICE_Q, texts, CFG) for texts in corpus_texts]


# A worked turn that makes SmolLM2 write rationales of several lengths (without one it writes one or
# none), so the limit's two ways of ending a rationale are both exercised; the app's prompt has none.
WORKED = [{"role": "user", "content": "Documents:\n[1] The Eiffel Tower was built for the 1889 World's Fair in "
                                      "Paris. It is 330 metres tall and was designed by the engineering company of "
                                      "Gustave Eiffel.\n\nQuestion: Whose company designed the Eiffel Tower?"},
          {"role": "assistant", "content": "Rationale: It is 330 metres tall and was designed by the engineering "
                                           "company of Gustave Eiffel.\nAnswer: Gustave Eiffel"}]


WORKED_TEXT = ("\n\nFor example:\nDocuments:\n[1] The lighthouse on Kell Point was painted by Ilse Marrow in "
               "1932.\n\nQuestion: Who painted the lighthouse on Kell Point?\nRationale: The lighthouse on Kell "
               "Point was painted by Ilse Marrow in 1932.\nAnswer: Ilse Marrow")


def _worked_prompts(drafter, corpus_texts: list[str]) -> list[list[int]]:
    out = []
    for texts in corpus_texts:
        msgs = draft_messages(NOTICE_Q, texts, CFG)
        out.append(drafter.encode_prompt(drafter.prompt.render([msgs[0], *WORKED, *msgs[1:]]) + "Rationale:"))
    return out


SUBSETS = [
    ["Either party may terminate this agreement with 30 days written notice.",
     "Tomatoes need full sun and deep watering twice a week."],
    ["Invoices are due within 14 days of receipt. Late payments carry a 2% monthly fee.",
     "The blue ferry Aurora leaves for the island at seven in the morning."],
    ["Either party may terminate this agreement with 30 days written notice.",
     "Turn the compost heap every fortnight."],
]


def test_concurrent_drafting_equals_sequential(drafter):
    prompts = _prompts(drafter, SUBSETS)
    together = write_drafts(drafter.backend, prompts, CFG)
    one_by_one = [write_drafts(drafter.backend, [p], CFG)[0] for p in prompts]
    for a, b in zip(together, one_by_one, strict=True):
        assert a.rationale + a.forced + a.answer == b.rationale + b.forced + b.answer
        assert a.answer_text == b.answer_text and a.rationale_text == b.rationale_text
        assert a.logprob == pytest.approx(b.logprob, abs=0.05 * max(a.n_tokens, 1) + 0.1)
    assert any(d.answer for d in together)
    assert drafter.backend.n_past == 0  # every draft sequence was cleared


def test_draft_logprob_matches_token_by_token_decoding(drafter):
    d = write_drafts(drafter.backend, _prompts(drafter, SUBSETS[:1]), CFG)[0]
    assert d.n_tokens > 0
    be = drafter.backend
    be.reset()
    logits = be.prefill(d.prompt)
    by_hand = 0.0
    # log P(rationale) + log P(answer | rationale): the forced "\nAnswer:" tokens are fed, not scored.
    for tok, scored in [(t, True) for t in d.rationale] + [(t, False) for t in d.forced] + [(t, True) for t in d.answer]:
        if scored:
            by_hand += _logsoftmax(logits)[tok]
            assert tok == int(np.argmax(logits))  # greedy
        logits = be.decode_one(tok)
    be.reset()
    assert d.logprob == pytest.approx(by_hand, rel=0.05, abs=0.05 * d.n_tokens)


def test_an_answer_ends_at_a_sentence_end_or_the_draft_is_dropped(drafter):
    """A draft's answer ends at end-of-generation, a line break or a sentence end, within the
    request's max tokens; one that would need more is dropped whole, never cut mid-word."""
    prompts = _prompts(drafter, SUBSETS)
    full = write_drafts(drafter.backend, prompts, CFG, max_answer_tokens=64)
    be = drafter.backend
    for d in full:
        assert d.complete and d.answer, d.answer_text
        be.reset()  # the token that ended the answer, by plain decoding
        logits = be.prefill(d.prompt + d.rationale + d.forced + d.answer)
        nxt = int(np.argmax(logits))
        piece = be.token_bytes(nxt).decode("utf-8", errors="replace")
        be.reset()
        if d.ended == "sentence":
            assert d.answer_text.rstrip().endswith((".", "!", "?")) and piece[:1].isspace()
        else:
            assert (be.is_eog(nxt) and d.ended == "eog") or ("\n" in piece and d.ended == "line")
    limit = min(len(d.answer) for d in full) + 1
    short = write_drafts(drafter.backend, prompts, CFG, max_answer_tokens=limit)
    for s, f in zip(short, full, strict=True):
        if len(f.answer) <= limit:
            assert (s.answer, s.ended) == (f.answer, f.ended)
        else:  # too long for the limit: dropped, not cut into an answer
            assert s.ended == "limit" and not s.complete and s.answer == f.answer[:limit]


def test_a_rationale_at_its_limit_ends_at_a_sentence_end(drafter):
    """At its token limit a rationale ends at its last sentence end, its KV cut back to it, or runs
    on to finish its sentence (within twice the limit): the drafter never copies a cut sentence into
    its answer. The answer is the drafter's own continuation of the kept rationale alone."""
    prompts = _worked_prompts(drafter, SUBSETS)
    free = write_drafts(drafter.backend, prompts, CFG.with_(rationale_tokens=64), max_answer_tokens=64)
    cfg = CFG.with_(rationale_tokens=20)
    limited = write_drafts(drafter.backend, prompts, cfg, max_answer_tokens=64)
    be = drafter.backend
    cut_back = ran_on = 0
    for d, f in zip(limited, free, strict=True):
        assert f.rationale[:len(d.rationale)] == d.rationale and not d.rationale_next
        if len(f.rationale) > len(d.rationale):  # the limit ended it early: at a sentence end
            assert d.rationale_text.rstrip().endswith((".", "!", "?")) and d.rationale_text.strip()
        cut_back += len(d.rationale) < cfg.rationale_tokens < len(f.rationale)
        ran_on += len(d.rationale) > cfg.rationale_tokens
        be.reset()  # plain decoding from the kept rationale: the cut tokens play no part
        assert int(np.argmax(be.prefill(d.prompt + d.rationale + d.forced))) == d.answer[0]
        be.reset()
    assert cut_back >= 1 and ran_on >= 1


def test_a_grounded_answer_ends_within_max_tokens_or_its_draft_is_dropped(index, drafter, verifier):
    """The request's max_tokens bounds every draft's answer: a draft whose answer ends within it is
    the same as with room to spare; one whose answer needs more is dropped whole, so no answer
    (nor any draft shown as chosen) is ever cut mid-word."""
    # 3 subsets; a worked example in the drafter's instructions (the app's has none) makes SmolLM2 write
    # answers of several lengths, so that a limit between them keeps some drafts and drops others
    cfg = CFG.with_(min_score=-1e9, min_relevance=0.0, drafter_prompt=CFG.drafter_prompt + WORKED_TEXT)
    pipe = GroundedPipeline(drafter, verifier, cfg)
    roomy = pipe.answer(NOTICE_Q, index, gen=GenerationConfig(max_tokens=64))
    assert len(roomy.extras.drafts) == 3 and not any(d.dropped for d in roomy.extras.drafts)
    full = {d.subset: d for d in roomy.extras.drafts}
    one = pipe.answer(NOTICE_Q, index, gen=GenerationConfig(max_tokens=1))  # each answer stops after 1 token
    assert all(d.dropped == "its answer did not end within 1 token" for d in one.extras.drafts)
    assert one.text == "" and not one.supported and one.citations == []
    assert one.extras.unsupported_reason == "no draft finished its answer within 1 token"
    rationale = {d.subset: d.n_draft_tokens - 1 for d in one.extras.drafts}
    answer_tokens = {s: full[s].n_draft_tokens - rationale[s] for s in full}
    limit = min(answer_tokens.values())
    assert max(answer_tokens.values()) > limit  # so that some answers fit the limit and some do not
    tight = pipe.answer(NOTICE_Q, index, gen=GenerationConfig(max_tokens=limit))
    for d in tight.extras.drafts:
        if answer_tokens[d.subset] <= limit:  # it ended within the limit: the same draft
            assert not d.dropped
            assert (d.answer, d.rationale, d.n_draft_tokens) == (full[d.subset].answer, full[d.subset].rationale,
                                                                 full[d.subset].n_draft_tokens)
        else:  # it wrote `limit` answer tokens and had not ended: dropped, not cut into an answer
            assert d.dropped == f"its answer did not end within {limit} tokens"
            assert d.n_draft_tokens == rationale[d.subset] + limit and full[d.subset].answer.startswith(d.answer)
    kept = [d for d in tight.extras.drafts if not d.dropped]
    assert tight.text in {d.text for d in kept}


def test_extractive_drafts_copy_spans_and_keep_the_drafters_own_logprob(drafter):
    prompts = _prompts(drafter, SUBSETS)
    sources = [chunk_tokens(drafter, texts) for texts in SUBSETS]
    cfg = CFG.with_(extractive=True)
    together = write_drafts(drafter.backend, prompts, cfg, sources=sources)
    one_by_one = [write_drafts(drafter.backend, [p], cfg, sources=[s])[0] for p, s in zip(prompts, sources, strict=True)]
    for a, b in zip(together, one_by_one, strict=True):  # concurrent == sequential here too
        assert a.rationale + a.forced + a.answer == b.rationale + b.forced + b.answer
    be = drafter.backend
    newline = be.tokenize("\n", add_special=False)[-1]
    for d, src, texts in zip(together, sources, SUBSETS, strict=True):
        assert d.rationale and d.answer
        for part in (d.rationale_text, d.answer_text):  # both are quotes of the subset's chunks
            assert any(part.strip() in t for t in texts), part
        # replay: every token is the best-scoring span continuation (or stop), scored by the
        # drafter's unconstrained log-softmax
        be.reset()
        logits = be.prefill(d.prompt)
        copy = SpanCopy(src)
        by_hand = 0.0
        for phase in (d.rationale, d.answer):
            copy.restart()
            for j, tok in enumerate(phase):
                allowed = copy.next_tokens() | ({newline} if j > 0 else set())
                assert tok == max(allowed, key=lambda t: logits[t])
                by_hand += _logsoftmax(logits)[tok]
                copy.take(tok)
                logits = be.decode_one(tok)
            if phase is d.rationale:
                for tok in d.forced:
                    logits = be.decode_one(tok)
        be.reset()
        assert d.logprob == pytest.approx(by_hand, rel=0.05, abs=0.05 * d.n_tokens)


def test_the_reflection_is_log_p_yes_by_token_by_token_decoding(verifier):
    drafts = [("30 days", "Either party may terminate this agreement with 30 days written notice."),
              ("14 days", "Either party may terminate this agreement with 30 days written notice.")]
    reflections = score_drafts(verifier.backend, NOTICE_Q, drafts, CFG)
    be = verifier.backend
    for (answer, rationale), got in zip(drafts, reflections, strict=True):
        tokens = verifier_tokens(be, NOTICE_Q, answer, rationale, CFG)
        assert be.detokenize(tokens[:-1]).endswith(f"Rationale: {rationale}\nAnswer: {answer}\n"
                                                   f"{CFG.reflection_question}\n")
        be.reset()
        logits = be.prefill(tokens[:-1])  # the row before "Yes", one sequence alone
        be.reset()
        # batched and one-sequence llama.cpp kernels differ slightly
        assert got == pytest.approx(_logsoftmax(logits)[tokens[-1]], abs=0.5)
        assert got < 0
    # the rationale says 30 days: the verifier believes it supports "30 days" more than "14 days"
    assert reflections[0] > reflections[1]


def test_answer_reports_drafts_scores_timing_and_cites_the_used_chunks(index, drafter, verifier):
    cfg = CFG.with_(min_score=-1e9)  # always supported: this test is about citations
    t0 = time.perf_counter()
    result = GroundedPipeline(drafter, verifier, cfg).answer(NOTICE_Q, index)
    took = time.perf_counter() - t0
    assert result.supported and result.mode == "grounded"
    gs = result.extras
    phases = (result.stats.search.seconds, gs.cluster_s, gs.draft_s, gs.verify_s)  # one after another
    assert all(s > 0 for s in phases) and sum(phases) <= result.stats.total_s <= took, (phases, took)
    assert gs.n_drafts == len(result.extras.drafts) and result.stats.mode == "grounded"
    assert 1 <= len(result.extras.drafts) <= cfg.m
    assert len({d.subset for d in result.extras.drafts}) == len(result.extras.drafts)  # unique subsets
    assert [d.score for d in result.extras.drafts] == sorted((d.score for d in result.extras.drafts), reverse=True)
    best = result.extras.drafts[0]
    for d in result.extras.drafts:
        expect = d.draft_logprob / max(d.n_draft_tokens, 1) + d.reflection
        assert d.score == pytest.approx(expect)
    # the citations are exactly the chunks of the winning subset, which is what its drafter saw
    _, relevant = retrieve(index, NOTICE_Q, cfg)
    used = [relevant[i] for i in best.subset]
    assert [c.chunk_id for c in result.citations] == [h.chunk_id for h in used]
    assert [c.label for c in result.citations] == [h.citation() for h in used]
    prompt_text = drafter.backend.detokenize(draft_prompt(drafter, NOTICE_Q, [h.text for h in used], cfg))
    for c in result.citations:
        assert c.text.strip() in prompt_text
        assert c.snippet and c.file.endswith((".md", ".txt"))
    assert best.answer in result.text


def test_the_chosen_draft_is_checked_and_cites_only_what_supports_it(index, drafter, verifier):
    """With the answer layer's aligner, the final check: the chosen draft's sentence-level evidence
    in its own subset. Its citations are the chunks that evidence cites (not its whole subset), the
    other retrieved chunks are listed apart, and it is supported only if the evidence is too."""
    cfg = CFG.with_(min_score=-1e9)
    aligner = EvidenceAligner(index.embedder)
    result = GroundedPipeline(drafter, verifier, cfg, aligner=aligner).answer(NOTICE_Q, index)
    best = next(d for d in result.extras.drafts if not is_refusal(d.answer))
    _, relevant = retrieve(index, NOTICE_Q, cfg)
    used = [relevant[i] for i in best.subset]
    assert result.text == best.text
    assert result.evidence == aligner.align(result.text, used, question=NOTICE_Q)
    assert [c.chunk_id for c in result.citations] == list(result.evidence.cited)
    assert set(result.evidence.cited) <= {h.chunk_id for h in used}
    assert {c.chunk_id for c in result.citations + result.also_searched} == {h.chunk_id for h in relevant}
    assert not {c.chunk_id for c in result.citations} & {c.chunk_id for c in result.also_searched}
    assert result.supported == result.evidence.supported


def test_nothing_relevant_means_no_answer_is_invented(index, drafter, verifier):
    result = GroundedPipeline(drafter, verifier, CFG).answer("What is the melting point of tungsten in kelvin?", index)
    assert not result.supported
    assert result.extras.drafts == [] and result.citations == [] and result.text == ""
    assert result.extras.unsupported_reason == "nothing relevant was retrieved"
    refused = apply_policy(result, "warn", result.extras.unsupported_reason)  # nothing to warn about
    assert refused.refusal.startswith("Your documents do not support an answer to this question "
                                      "(nothing relevant was retrieved)")
    assert "melting point of tungsten" in result.searched and result.searched in refused.refusal


def test_no_draft_above_threshold_is_unsupported(index, drafter, verifier):
    result = GroundedPipeline(drafter, verifier, CFG.with_(min_score=1e9)).answer(NOTICE_Q, index)
    assert not result.supported and result.extras.drafts
    best = next(d for d in result.extras.drafts if not is_refusal(d.answer))
    assert result.text == best.text  # kept, to be shown labelled as unsupported
    why = result.extras.unsupported_reason
    assert why == "no draft passed the verifier's threshold"
    refused = apply_policy(result, "refuse", why)
    assert refused.refused and why in refused.refusal and result.searched in refused.refusal


def test_no_index_is_unsupported(drafter, verifier):
    result = GroundedPipeline(drafter, verifier, CFG).answer(NOTICE_Q, None)
    assert not result.supported and "no document index" in result.searched
