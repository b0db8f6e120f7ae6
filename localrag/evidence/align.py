"""The evidence aligner: one function per phase of aligning one sentence (see the package docstring)."""

from __future__ import annotations

import bisect
import hashlib
import math
import re
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from localrag.evidence.records import Embedder, EvidenceChunk, EvidenceConfig, Judge
from localrag.evidence.text import (
    Token,
    Tokenizer,
    code_words,
    entity_words,
    is_content,
    paths,
    source_refs,
    split_sentences,
    stem,
    unit_after,
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
from localrag.textindex import SuffixIndex


def _sigmoid(z: float) -> float:
    return 1.0 / (1.0 + math.exp(-z)) if z > -50 else 0.0


# ------------------------------------------------------------------ chunks, prepared once
@dataclass
class _PreparedChunk:
    """A chunk's tokens, their ids in the aligner's vocabulary, a suffix array over them, its stems
    and sentences (cached by text: a chat keeps retrieving the same chunks)."""

    tokens: list[Token]
    ids: list[int]
    index: SuffixIndex
    stems: frozenset[str]
    norms: frozenset[str]
    sentences: list[tuple[int, int]]  # character spans
    sentence_of: list[int]  # token -> its sentence
    sentence_stems: list[frozenset[str]]
    conditional: list[bool]  # token -> inside an "if ..." / "unless ..." clause (said under a condition)


@dataclass(frozen=True)
class _Segment:
    """Sentence tokens [i, i + length) copied from chunk tokens [pos, pos + length)."""

    i: int
    length: int
    pos: int


@dataclass
class _Candidate:
    """One chunk as evidence for one sentence."""

    chunk: int  # index into the chunks given
    segments: list[_Segment]  # exact matches long enough to count
    exact: set[int]  # sentence token indices inside those matches
    supported: set[int]  # content token indices found in the chunk (stem or exact)
    window: list[int] = field(default_factory=list)  # chunk sentences holding the evidence
    context: float = 0.0
    rank: float = 0.0


@dataclass
class _Found:
    """A sentence's evidence before the model-based signals (embedding, judge) and the score."""

    text: str
    start: int
    end: int
    tokens: list[Token]
    spans: tuple[EvidenceSpan, ...]
    window: list[tuple[int, int]]  # (chunk, chunk sentence) holding the best chunk's evidence
    window_text: str  # what the embedding and the judge compare the claim with
    exact: float
    overlap: float
    missing: tuple[str, ...]
    n_content: int
    n_novel: int  # content words the question does not already have
    n_novel_supported: int
    matched: tuple[tuple[int, int], ...]  # answer characters inside the exact matches
    rule: str = ""  # why the sentence cannot be supported whatever its score ('' when it can)


class EvidenceAligner:
    """Aligns answers to chunks; see the module docstring. Keeps a small cache of prepared chunks,
    so one aligner should serve a session (not thread-safe)."""

    def __init__(self, embedder: Embedder | None = None, tokenize: Tokenizer = word_tokens,
                 judge: Judge | None = None, config: EvidenceConfig | None = None, cache_size: int = 256):
        self.embedder = embedder
        self.tokenize = tokenize
        self.judge = judge
        self.config = config or EvidenceConfig()
        self._vocab: dict[str, int] = {}
        self._prepared: OrderedDict[str, _PreparedChunk] = OrderedDict()
        self._cache_size = cache_size

    # ---------------------------------------------------------------- preparing
    def _ids(self, tokens: Sequence[Token], add: bool) -> list[int]:
        """Vocabulary ids; an unknown word of an answer gets -1 (it occurs in no chunk)."""
        if add:
            return [self._vocab.setdefault(t.norm, len(self._vocab)) for t in tokens]
        return [self._vocab.get(t.norm, -1) for t in tokens]

    def _prepare(self, text: str) -> _PreparedChunk:
        key = hashlib.sha1(text.encode("utf-8")).hexdigest()
        hit = self._prepared.get(key)
        if hit is not None:
            self._prepared.move_to_end(key)
            return hit
        tokens = self.tokenize(text)
        ids = self._ids(tokens, add=True)
        sentences = split_sentences(text, line_breaks=False)
        ends = [b for _, b in sentences]
        sentence_of = [min(bisect.bisect_right(ends, t.start), len(sentences) - 1) for t in tokens]
        sentence_stems: list[set[str]] = [set() for _ in sentences]
        for t, k in zip(tokens, sentence_of, strict=True):
            sentence_stems[k].add(stem(t.norm))
        conditional = _conditional(text, tokens, sentences, sentence_of)
        prepared = _PreparedChunk(tokens, ids, SuffixIndex(ids), frozenset(stem(t.norm) for t in tokens),
                                  frozenset(t.norm for t in tokens), sentences, sentence_of,
                                  [frozenset(x) for x in sentence_stems], conditional)
        self._prepared[key] = prepared
        while len(self._prepared) > self._cache_size:
            self._prepared.popitem(last=False)
        return prepared

    # ---------------------------------------------------------------- aligning
    def align(self, answer: str, chunks: Sequence[EvidenceChunk], question: str = "",
              copied: Sequence[CopiedSpan] = (), confidence: float | None = None,
              answerable: float | None = None) -> AnswerEvidence:
        """The evidence of every sentence of ``answer`` in ``chunks`` (see the module docstring).
        ``confidence``: the mean log-probability the answer model gave its own tokens, where known;
        ``answerable``: the answerability judge's p(answerable) of the question, where it read it."""
        t0 = time.perf_counter()
        prepared = [self._prepare(c.text) for c in chunks]
        question_tokens = self.tokenize(question)
        question_stems = {stem(t.norm) for t in question_tokens if is_content(t)}
        asks_condition = any(t.norm in CONDITION_WORDS for t in question_tokens)
        # a "sentence" without a word ("...", a lone dash) claims nothing: it has no evidence to find
        spans = [(a, b) for a, b in split_sentences(answer) if self.tokenize(answer[a:b])]
        found = [self._sentence(answer, a, b, chunks, prepared, question_stems, asks_condition) for a, b in spans]
        embeddings, relevance = self._embedding_signal(question, found)
        judged, judge_seconds = self._judge_signal(question, found)
        sentences = tuple(self._finish(f, emb, jd) for f, emb, jd in zip(found, embeddings, judged, strict=True))
        cited = tuple(dict.fromkeys(sp.chunk_id for s in sentences if s.supported for sp in s.spans))
        also = tuple(dict.fromkeys(c.chunk_id for c in chunks if c.chunk_id not in cited))
        context, unmatched = _question_match(question_tokens, question_stems, found, prepared)
        n_novel = sum(f.n_novel for f in found)
        novel = sum(f.n_novel_supported for f in found) / n_novel if n_novel else 0.0
        score, support = self._answer_score(found, sentences, context, unmatched, novel, relevance, confidence,
                                            answerable)
        confirmed = sum(self._confirms(cp, answer, found, chunks) for cp in copied)
        stats = AlignmentStats(time.perf_counter() - t0, sum(j is not None for j in judged), judge_seconds,
                               len(copied), confirmed)
        # supported: the score reaches the threshold and at least one sentence is supported (an answer
        # none of whose sentences the documents hold is never presented as backed by them)
        supported = score >= self.config.refusal_threshold and bool(cited)
        return AnswerEvidence(sentences, score, supported, cited, also,
                              support=support, context=context, novel=novel, unmatched=unmatched,
                              relevance=relevance, confidence=confidence, answerable=answerable,
                              threshold=self.config.refusal_threshold,
                              stats=stats, copied=tuple(copied))

    def _sentence(self, answer: str, a: int, b: int, chunks: Sequence[EvidenceChunk],
                  prepared: list[_PreparedChunk], question_stems: set[str], asks_condition: bool = False) -> _Found:
        """Choose the sentence's evidence chunks and spans, its lexical signals, and the rule (if any)
        that keeps it unsupported whatever they score: "supported" means the sources answer the
        question with what the sentence adds to it, so a sentence that adds nothing (the question's
        own words said back), one whose added words the sources lack (only the question's words were
        found), and one whose added words the sources say only as a condition ("if you get no reply
        within 6 business days, ...") of a question that asks for no condition, are not supported."""
        tokens = [Token(t.text, t.norm, t.start + a, t.end + a) for t in self.tokenize(answer[a:b])]
        refs = source_refs(answer[a:b], tokens, a)  # "according to source [1]": the prompt's numbering
        tokens = [t for i, t in enumerate(tokens) if i not in refs] or tokens
        ids = self._ids(tokens, add=False)
        content = [j for j, t in enumerate(tokens) if is_content(t)] or list(range(len(tokens)))
        novel = {j for j in content if stem(tokens[j].norm) not in question_stems}
        need = min(self.config.phrase_tokens, len(tokens))
        candidates = []
        for c, pc in enumerate(prepared):
            segments = [s for s in _cover(tokens, ids, pc, question_stems) if s.length >= need]
            exact = {j for s in segments for j in range(s.i, s.i + s.length)}
            supported = {j for j in content if j in exact or stem(tokens[j].norm) in pc.stems}
            cand = _Candidate(c, segments, exact, supported)
            cand.window = _window(pc, cand, tokens, novel, question_stems)
            relevance = len(question_stems.intersection(*(pc.sentence_stems[k] for k in cand.window))) if cand.window else 0
            cand.rank = (len(supported) / len(content) + 0.5 * len(exact) / max(1, len(tokens))
                         + 0.5 * relevance / max(1, len(question_stems)))
            candidates.append(cand)
        chosen = _choose([c for c in candidates if c.segments or len(c.supported) >= self.config.min_overlap * len(content)],
                         content, self.config.max_chunks)
        exact = set().union(*(c.exact for c in chosen))
        supported = set().union(*(c.supported for c in chosen))
        norms = set().union(*(prepared[c.chunk].norms for c in chosen))
        specific = entity_words(tokens) + code_words(answer[a:b], tokens, a)
        texts = [chunks[c.chunk].text for c in chosen]
        missing = tuple(dict.fromkeys([t.text for t in specific if t.norm not in norms]
                                      + _units_missing(tokens, [prepared[c.chunk] for c in chosen])
                                      + [p for p in paths(answer[a:b]) if not any(p in t for t in texts)]))
        window = [(c.chunk, k) for c in chosen[:1] for k in c.window]
        polar = bool(tokens) and tokens[0].norm in POLAR  # "Yes, ..." answers with the question's own words
        # what the sentence adds to the question: its content words and numbers ("6" is no content
        # word, yet it is the answer) whose stems the question lacks, and which of them a chunk holds
        stems_found = set().union(*(prepared[c.chunk].stems for c in chosen))
        adds = {j for j, t in enumerate(tokens) if (is_content(t) or t.norm[0].isdigit())
                and stem(t.norm) not in question_stems}
        found = {j for j in adds if j in exact or stem(tokens[j].norm) in stems_found}
        if not adds and not polar:
            rule = "it only restates the question"
        elif adds and not found and not polar:
            rule = "what it adds to the question is not in the sources"
        elif (found and not asks_condition
              and not any(_asserted(j, chosen, prepared, tokens, ids, question_stems) for j in found)):
            rule = "the sources say it only as a condition"
        else:
            rule = ""
        return _Found(answer[a:b], a, b, tokens, _spans(chosen, chunks, prepared), window,
                      " ".join(chunks[c].text[slice(*prepared[c].sentences[k])] for c, k in window),
                      len(exact) / max(1, len(tokens)), len(supported) / len(content), missing,
                      len(content) if tokens else 0, len(novel), len(novel & supported),
                      tuple((tokens[s.i].start, tokens[s.i + s.length - 1].end) for c in chosen for s in c.segments),
                      rule)

    def _embedding_signal(self, question: str, found: list[_Found]) -> tuple[list[float | None], float | None]:
        """(cosine of each claim (question + sentence) to its evidence window, the highest cosine of
        the question itself to a window), in one batch."""
        todo = [k for k, f in enumerate(found) if f.window_text]
        out: list[float | None] = [None] * len(found)
        if self.embedder is None or not todo:
            return out, None
        claims = [_claim(question, found[k].text) for k in todo]
        vecs = self.embedder.embed(claims + [found[k].window_text for k in todo] + [question.strip() or "?"])
        windows = vecs[len(todo):2 * len(todo)]
        for j, k in enumerate(todo):
            out[k] = float(vecs[j] @ windows[j])
        return out, float((windows @ vecs[-1]).max()) if question.strip() else None

    def _judge_signal(self, question: str, found: list[_Found]) -> tuple[list[float | None], float]:
        """The judge's P(yes) per sentence, in order, until its time exceeds the budget."""
        out: list[float | None] = [None] * len(found)
        spent = 0.0
        if self.judge is None:
            return out, spent
        for k, f in enumerate(found):
            if not f.window_text or spent > self.config.judge_budget_s:
                continue
            t = time.perf_counter()
            out[k] = float(self.judge(_claim(question, f.text), f.window_text))
            spent += time.perf_counter() - t
        return out, spent

    def _finish(self, f: _Found, embedding: float | None, judge: float | None) -> SentenceEvidence:
        cfg = self.config
        z = (cfg.bias + cfg.weight_exact * f.exact + cfg.weight_overlap * f.overlap
             + cfg.weight_embedding * (cfg.embedding_default if embedding is None else embedding)
             + cfg.weight_missing * bool(f.missing))
        if judge is not None:
            z += cfg.weight_judge * (logit(judge) - cfg.judge_center)
        score = _sigmoid(z) if f.spans else 0.0
        if not f.spans:
            reason = "not found in the sources"
        elif f.missing:
            word = f.missing[0]
            kind = ("path" if "/" in word else "unit" if " " in word else "number" if word[0].isdigit()
                    else "name" if word[0].isupper() else "code")
            reason = f'{kind} "{word}" not in the sources'
        elif f.rule:
            reason = f.rule
        elif score < cfg.sentence_threshold:
            reason = "weak match with the sources"
        else:
            reason = ""
        return SentenceEvidence(f.text, f.start, f.end, f.spans, score, not reason, reason,
                                Signals(f.exact, f.overlap, embedding, f.missing, judge))

    def _answer_score(self, found: list[_Found], sentences: Sequence[SentenceEvidence], context: float,
                      unmatched: tuple[str, ...], novel: float, relevance: float | None,
                      confidence: float | None, answerable: float | None) -> tuple[float, float]:
        """(score, support): support is the content-weighted mean sentence score; the score moves
        it, on the logit scale, by how well the evidence meets the question (its words, its numbers
        and names), holds what the answer adds to it, by how sure the model was of its words
        (a model that reads the answer in its sources gives it high probability; one that guesses,
        or answers a question the sources only resemble, spreads it), and by the answerability
        judge's view of the question before a word was written (``localrag.judge``)."""
        support = float(np.average([s.score for s in sentences], weights=[max(1, f.n_content) for f in found])
                        ) if sentences else 0.0
        if support == 0.0:
            return 0.0, 0.0
        cfg = self.config
        z = (logit(support) + cfg.weight_context * (context - 1.0) + cfg.weight_unmatched * bool(unmatched)
             + cfg.weight_novel * (novel - 1.0)
             + cfg.weight_relevance * ((cfg.relevance_default if relevance is None else relevance) - 1.0)
             + cfg.weight_confidence * ((cfg.confidence_default if confidence is None else confidence)
                                        - cfg.confidence_default)
             + cfg.weight_answerable * ((cfg.answerable_center if answerable is None else logit(answerable))
                                        - cfg.answerable_center))
        return _sigmoid(z), support

    def _confirms(self, cp: CopiedSpan, answer: str, found: list[_Found], chunks: Sequence[EvidenceChunk]) -> bool:
        """A copied span is confirmed when the chunk reads there what the answer reads, and every
        word of it lies inside an exact match the alignment found."""
        source = next((c.text for c in chunks if c.chunk_id == cp.chunk_id), None)
        words = self.tokenize(answer[cp.answer_start:cp.answer_end])
        if source is None or [t.norm for t in self.tokenize(source[cp.start:cp.end])] != [t.norm for t in words]:
            return False
        matched = [r for f in found for r in f.matched]
        return all(any(a <= cp.answer_start + t.start and cp.answer_start + t.end <= b for a, b in matched)
                   for t in words)


# ------------------------------------------------------------------ what a chunk asserts
POLAR = ("yes", "no")
CONDITION_WORDS = frozenset(("if", "unless", "otherwise", "whether"))
_CLAUSE_END = re.compile(r"[,;:()]|\bthen\b")


def _conditional(text: str, tokens: list[Token], sentences: list[tuple[int, int]],
                 sentence_of: list[int]) -> list[bool]:
    """Per token, whether it lies in a conditional clause: from "if" or "unless" to the next comma,
    semicolon, colon, bracket or "then" of its sentence (or the sentence's end). Such a clause states
    nothing as fact: "If you get no reply within 6 business days, escalate" says nothing of how
    soon a reply comes."""
    out = [False] * len(tokens)
    for k, t in enumerate(tokens):
        if t.norm not in ("if", "unless") or out[k]:
            continue
        end = sentences[sentence_of[k]][1] if sentences else len(text)
        stop = _CLAUSE_END.search(text, t.end, end)
        limit = stop.start() if stop else end
        j = k
        while j < len(tokens) and tokens[j].start < limit:
            out[j] = True
            j += 1
    return out


def _asserted(j: int, chosen: list[_Candidate], prepared: list[_PreparedChunk], tokens: list[Token],
              ids: list[int], question_stems: set[str]) -> bool:
    """Whether sentence token ``j`` is stated by a chosen chunk: found outside a conditional clause
    (inside an exact match, at any place of that match; else its stem anywhere), or inside one whose
    sentence's consequence the question asks about ("how many days before I may escalate?" is
    answered by "if you get no reply within 6 business days, you may escalate")."""
    answer_stems = {stem(t.norm) for t in tokens}
    for cand in chosen:
        pc = prepared[cand.chunk]
        seg = next((s for s in cand.segments if s.i <= j < s.i + s.length), None)
        if seg is not None:
            places = [p + j - seg.i for p in pc.index.find(ids[seg.i:seg.i + seg.length])]
        else:
            places = [p for p, t in enumerate(pc.tokens) if stem(t.norm) == stem(tokens[j].norm)]
        for p in places:
            if not pc.conditional[p]:
                return True
            k = pc.sentence_of[p]
            consequence = {stem(t.norm) for q, t in enumerate(pc.tokens) if pc.sentence_of[q] == k
                           and not pc.conditional[q]}
            if (consequence & question_stems) - answer_stems:
                return True
    return False


def _units_missing(tokens: list[Token], chunks: list[_PreparedChunk]) -> list[str]:
    """"N unit" pairs of the sentence (a number, then a unit of time, length, mass, money or share
    within the next two words) that no chunk writes with that unit after that number: "30 minutes"
    is not supported by "30 days", though both words are in the source."""
    out = []
    for k, t in enumerate(tokens):
        if not t.norm[0].isdigit():
            continue
        unit = unit_after(tokens, k)
        if unit is None or not any(t.norm in c.norms for c in chunks):  # a missing number is missing already
            continue
        want = stem(unit.norm)
        if not any(stem(c.tokens[p].norm) == want for c in chunks for i, ct in enumerate(c.tokens)
                   if ct.norm == t.norm for p in range(i + 1, min(i + 3, len(c.tokens)))):
            out.append(f"{t.text} {unit.text}")
    return out


# ------------------------------------------------------------------ phases of one sentence
def _cover(tokens: list[Token], ids: list[int], chunk: _PreparedChunk, question_stems: set[str]) -> list[_Segment]:
    """Greedy longest matches left to right: at each position, the longest run of the sentence
    that occurs in the chunk (binary search on its length: a run occurs only if its prefixes do).
    A run found several times is placed in the chunk sentence sharing most words with the question."""
    segments, i, n = [], 0, len(ids)
    while i < n:
        if tokens[i].norm not in chunk.norms:
            i += 1
            continue
        lo, hi = 1, n - i
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if chunk.index.count(ids[i:i + mid]):
                lo = mid
            else:
                hi = mid - 1
        places = chunk.index.find(ids[i:i + lo])
        pos = max(places, key=lambda p: (len(question_stems & chunk.sentence_stems[chunk.sentence_of[p]]), -p))
        segments.append(_Segment(i, lo, pos))
        i += lo
    return segments


def _window(chunk: _PreparedChunk, cand: _Candidate, tokens: list[Token], novel: set[int],
            question_stems: set[str]) -> list[int]:
    """The chunk sentences holding the evidence of what the sentence adds to the question (its novel
    words; all its words when none is found): those holding exact matches of them, else the chunk
    sentence sharing most of their stems (then most of the question's)."""
    held = (novel & cand.supported) or cand.supported
    if not held:
        return []
    segments = [s for s in cand.segments if any(s.i <= j < s.i + s.length for j in held)]
    if segments:
        return sorted({chunk.sentence_of[s.pos + d] for s in segments for d in range(s.length)})
    want = {stem(tokens[j].norm) for j in held}
    best = max(range(len(chunk.sentences)),
               key=lambda k: (len(want & chunk.sentence_stems[k]), len(question_stems & chunk.sentence_stems[k]), -k))
    return [best]


def _question_match(question_tokens: list[Token], question_stems: set[str], found: list[_Found],
                    prepared: list[_PreparedChunk]) -> tuple[float, tuple[str, ...]]:
    """(context, unmatched): the share of the question's content stems found in the answer or in
    its evidence windows (a short answer copied from a passage about something else scores low), and
    the question's numbers and names found neither in the answer nor in its evidence chunks."""
    answer = [t for f in found for t in f.tokens]
    windows = [(c, j) for f in found for c, k in f.window for j in (k - 1, k) if j >= 0]  # + the sentence before
    have = {stem(t.norm) for t in answer}.union(*(prepared[c].sentence_stems[k] for c, k in windows))
    context = len(question_stems & have) / len(question_stems) if question_stems else 1.0
    norms = {t.norm for t in answer}.union(*(prepared[c].norms for c in {c for c, _ in windows}))
    unmatched = tuple(dict.fromkeys(t.text for t in entity_words(question_tokens) if t.norm not in norms))
    return context, unmatched


def _choose(candidates: list[_Candidate], content: list[int], max_chunks: int) -> list[_Candidate]:
    """The best chunk, then while content words stay uncovered, the chunk covering most of them."""
    ranked = sorted((c for c in candidates if c.supported or c.exact), key=lambda c: (-c.rank, c.chunk))
    if not ranked:
        return []
    chosen = [ranked[0]]
    left = set(content) - ranked[0].supported
    while left and len(chosen) < max_chunks:
        best = max(ranked, key=lambda c: (len(c.supported & left), len(c.exact & left), -c.chunk))
        if best in chosen or not best.supported & left:
            break
        chosen.append(best)
        left -= best.supported
    return chosen


def _spans(chosen: list[_Candidate], chunks: Sequence[EvidenceChunk],
           prepared: list[_PreparedChunk]) -> tuple[EvidenceSpan, ...]:
    """Character spans of the chosen chunks' matches (a later chunk's only where it adds words);
    a chunk chosen for its words alone (a paraphrase) gives its window sentence."""
    spans: list[EvidenceSpan] = []
    covered: set[int] = set()
    for cand in chosen:
        chunk, pc = chunks[cand.chunk], prepared[cand.chunk]
        ranges = [(pc.tokens[s.pos].start, pc.tokens[s.pos + s.length - 1].end) for s in cand.segments
                  if not set(range(s.i, s.i + s.length)) <= covered]
        if not ranges:
            ranges = [pc.sentences[k] for k in cand.window]
        covered |= cand.exact | cand.supported
        spans += [EvidenceSpan(chunk.chunk_id, x, y, chunk.file, chunk.page, chunk.line_start, chunk.line_end)
                  for x, y in ranges]
    return tuple(spans)


def _claim(question: str, sentence: str) -> str:
    return f"{question.strip()} {sentence.strip()}".strip()


def logit(p: float) -> float:
    p = min(max(p, 1e-6), 1 - 1e-6)
    return math.log(p / (1 - p))


# ------------------------------------------------------------------ a judge from a language model
class VerifierJudge:
    """A :data:`Judge` from a causal LM backend (``tokenize``, ``reset``, ``prefill``): P("Yes")
    against P("No") as the next token after a yes/no question on the passage and the claim."""

    PROMPT = "Passage: {evidence}\nClaim: {claim}\nIs the claim supported by the passage? Answer Yes or No.\nAnswer:"

    def __init__(self, backend, max_evidence_chars: int = 1200):
        self.backend = backend
        self.max_evidence_chars = max_evidence_chars
        self.yes = backend.tokenize(" Yes", add_special=False)[0]
        self.no = backend.tokenize(" No", add_special=False)[0]

    def __call__(self, claim: str, evidence: str) -> float:
        prompt = self.PROMPT.format(evidence=evidence[: self.max_evidence_chars], claim=claim)
        self.backend.reset()
        logits = self.backend.prefill(self.backend.tokenize(prompt, add_special=True))
        yes, no = float(logits[self.yes]), float(logits[self.no])
        self.backend.reset()
        return _sigmoid(yes - no)
