"""Sentence-level evidence: which sentences of an answer the retrieved chunks support, and where.

UI-free and model-free: the aligner is given the answer text, the chunks the answer was written
from (anything with ``chunk_id``, ``text`` and the file/page/line anchors of a search hit), and
optionally the question, an embedder and a yes/no judge. Per sentence it returns the supporting
spans (chunk id, character offsets in the chunk text, the chunk's page or lines), a support score
in [0, 1] and, when unsupported, a short reason; per answer a content-weighted support score, the
chunks cited in order of first use, the retrieved chunks that support nothing ("also searched"),
and the seconds the alignment took.

    aligner = EvidenceAligner(embedder=index.embedder)
    evidence = aligner.align(answer_text, hits, question=question)
    marked = mark_citations(answer_text, evidence)       # "... 4.2 metres. [1]", ("chunk-id",)

Signals, per sentence, against the chunks chosen as its evidence (one chunk, or more when one does
not cover it all: an answer that joins two passages):

    exact     share of the sentence's tokens inside long matches copied from the chunk (greedy
              longest match, left to right, over a suffix array of the chunk's tokens)
    overlap   share of its content words whose stem occurs in the chunk
    embedding cosine of the claim (question + sentence) to the evidence window (the chunk
              sentences holding the matches), with the embedder given
    context   share of the question's content words found in the window or the sentence itself:
              a short answer copied from a passage about something else scores low
    missing   numbers, names and dates of the sentence that the evidence does not contain, a number
              the evidence never writes with the sentence's unit ("30 minutes" beside "30 days"),
              and a file path it does not write whole; any makes the sentence unsupported
              ('number "4.5" not in the sources')
    judge     optional: the judge's P(yes) that the window supports the claim, while its time
              stays within the budget

and rules that keep a sentence unsupported whatever it scores, because "supported" means the
sources answer the question with what the sentence adds to it: a sentence that adds nothing (the
question's own words said back), one whose added words no source holds (only the question's words
were found), and one whose added words a source says only inside a condition ("if you get no reply
within 6 business days, escalate"), unless the question asks about that condition or its
consequence. A "Yes, ..." or "No, ..." answers with the question's words and is exempt.

and per answer, given by the caller where known:

    confidence the answer model's mean log-probability of the tokens it wrote
              (``GenerationStats.mean_logprob``): a model that reads its answer in the sources
              writes it surely; one that guesses, or answers a question the sources only
              resemble, spreads its probability

The score is a logistic combination of the signals whose weights, and the thresholds, are fitted
on a calibration split kept apart from the reported one (:class:`EvidenceConfig`).

The records (``AnswerEvidence`` and what it holds, ``CopiedSpan``) are defined in ``localrag.results``
beside the ``AnswerResult`` that carries them, and re-exported here.

Copy provenance: a decoder that copied answer text from a chunk (RASD accepting retrieval tokens)
can pass those spans as ``copied``. The exact-match signal finds every copied run by itself, so the
evidence does not depend on them (the same answer text gets the same evidence in every mode); they
are checked against the alignment and the check is counted in the stats.
"""

from localrag.evidence.align import EvidenceAligner, VerifierJudge
from localrag.evidence.citations import mark_citations, split_citations, unsupported_reason
from localrag.evidence.records import Embedder, EvidenceChunk, EvidenceConfig, Judge, MarkedAnswer
from localrag.evidence.text import (
    Token,
    Tokenizer,
    declines,
    entity_words,
    foreign_words,
    is_refusal,
    split_sentences,
    stem,
    word_tokens,
)
from localrag.results import (
           AlignmentStats,
           AnswerEvidence,
           CopiedSpan,
           EvidenceSpan,
           SentenceEvidence,
           Signals,
)

__all__ = ["AlignmentStats", "AnswerEvidence", "CopiedSpan", "Embedder", "EvidenceAligner", "EvidenceChunk",
           "EvidenceConfig", "EvidenceSpan", "Judge", "MarkedAnswer", "SentenceEvidence", "Signals", "Token",
           "Tokenizer", "VerifierJudge", "declines", "entity_words", "foreign_words", "is_refusal", "mark_citations",
           "split_citations", "split_sentences", "stem", "unsupported_reason", "word_tokens"]
