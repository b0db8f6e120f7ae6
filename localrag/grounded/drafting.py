"""Grounded mode's drafting (Speculative RAG): m drafts from m chunk subsets, decoded concurrently.

Each subset's draft is one KV sequence of the drafter; every step is one llama_decode holding
the next token of every unfinished draft (see ``write_drafts``). A draft is

    "Rationale:" <evidence>  "\\nAnswer:" <answer>

greedy, with the drafter's per-token log-probabilities kept for scoring (``DrafterOutput``).
The drafter must be a ``BatchBackend`` (llama.cpp): every step decodes all drafts in one batch.

Extractive drafting (``GroundedConfig.extractive``, off by default): the rationale and the answer
must each be a contiguous span of the subset's chunks, token for token (``SpanCopy``). The pick
is the drafter's own argmax over the tokens that continue a span (or a stop); the kept
log-probability is the drafter's unconstrained log p of that token, so the draft score still says
how much the drafter believes it: its rationale is a real quote, its answer a phrase from the
documents. Measured with the bundled pair it answers worse than free drafts (the drafter copies
sentence openings rather than the answer), so it is an option, not the default.

    python -m localrag ask "How much notice ends the contract?" --mode grounded
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass, field

import numpy as np

from localrag.backends.base import BatchBackend
from localrag.config import GroundedConfig, RepetitionConfig
from localrag.engine import Engine
from localrag.generation import token_logprob
from localrag.repetition import RepetitionGuard
from localrag.results import AnswerProgress


@dataclass
class DrafterOutput:
    """One draft as the drafter produced it (drafter token ids and per-token log-probs)."""

    prompt: list[int]
    rationale: list[int] = field(default_factory=list)
    forced: list[int] = field(default_factory=list)  # "\nAnswer:" inserted after the rationale
    answer: list[int] = field(default_factory=list)
    rationale_lp: list[float] = field(default_factory=list)
    answer_lp: list[float] = field(default_factory=list)
    rationale_text: str = ""
    answer_text: str = ""
    # the piece that came next when the rationale ended cut: at twice its token limit, in a sentence
    # that had not ended ('' when it ended on its own or at a sentence end)
    rationale_next: str = ""
    # how the answer ended: "eog" (end-of-generation; extractive: no copied span continues), "line"
    # (a line break), "sentence" (a sentence end before the next word): complete; "limit" (the
    # answer's token limit came first) or "loop" (the repetition guard fired): incomplete, so the
    # draft cannot be the answer
    ended: str = ""

    @property
    def complete(self) -> bool:
        return self.ended in ("eog", "line", "sentence")

    @property
    def shown_rationale(self) -> str:
        return shown_rationale(self.rationale_text, self.rationale_next)

    @property
    def logprob(self) -> float:
        """log P(rationale) + log P(answer | rationale)."""
        return float(sum(self.rationale_lp) + sum(self.answer_lp))

    @property
    def n_tokens(self) -> int:
        return len(self.rationale) + len(self.answer)

    @property
    def n_written(self) -> int:
        """The tokens of its KV sequence: prompt, rationale, forced "Answer:" and answer."""
        return len(self.prompt) + len(self.rationale) + len(self.forced) + len(self.answer)


class SpanCopy:
    """Extractive constraint: the tokens taken since ``restart`` form a contiguous span of one of
    the source token sequences. ``open`` holds every (source, position) where that span could
    continue; the allowed next tokens are the tokens at those positions."""

    def __init__(self, sources: Sequence[Sequence[int]]):
        self.sources = [list(s) for s in sources]
        self.restart()

    def restart(self) -> None:
        self.open = [(s, p) for s, src in enumerate(self.sources) for p in range(len(src))]

    def next_tokens(self) -> set[int]:
        return {self.sources[s][p] for s, p in self.open}

    def take(self, token: int) -> None:
        self.open = [(s, p + 1) for s, p in self.open
                     if self.sources[s][p] == token and p + 1 < len(self.sources[s])]


def draft_messages(question: str, chunks: Sequence[str], cfg: GroundedConfig) -> list[dict]:
    """The drafter's conversation: instructions, then this subset's chunks and the question (no worked
    example: a drafter copies its words into answers; the "Rationale: ... Answer: ..." form is the
    decoder's, which writes both labels itself)."""
    return [{"role": "system", "content": cfg.drafter_prompt},
            {"role": "user", "content": _user_turn(chunks, question)}]


def draft_prompt(engine: Engine, question: str, chunks: Sequence[str], cfg: GroundedConfig) -> list[int]:
    """Drafter prompt tokens: ``draft_messages`` laid out, then "Rationale:" (the draft starts there)."""
    return engine.encode_prompt(engine.prompt.render(draft_messages(question, chunks, cfg)) + "Rationale:")


def chunk_tokens(engine: Engine, chunks: Sequence[str]) -> list[list[int]]:
    """The sources a draft may copy from, in the drafter's tokens. A leading space makes the first
    word tokenize as it does after "Rationale:" / "Answer:"."""
    return [engine.backend.tokenize(" " + c.strip(), add_special=False) for c in chunks]


def _user_turn(chunks: Sequence[str], question: str) -> str:
    docs = "\n\n".join(f"[{i}] {c.strip()}" for i, c in enumerate(chunks, start=1))
    return f"Documents:\n{docs}\n\nQuestion: {question}"


def write_drafts(backend: BatchBackend, prompts: Sequence[list[int]], cfg: GroundedConfig, seq_base: int = 0,
                 sources: Sequence[Sequence[Sequence[int]]] | None = None, max_answer_tokens: int = 256,
                 repetition: RepetitionConfig | None = None) -> list[DrafterOutput]:
    """Greedy drafts for all prompts at once (``draft_steps`` run to the end, its progress unused)."""
    steps = draft_steps(backend, prompts, cfg, seq_base, sources, max_answer_tokens, repetition)
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value


def draft_steps(backend: BatchBackend, prompts: Sequence[list[int]], cfg: GroundedConfig, seq_base: int = 0,
                sources: Sequence[Sequence[Sequence[int]]] | None = None, max_answer_tokens: int = 256,
                repetition: RepetitionConfig | None = None) -> Generator[AnswerProgress, None, list[DrafterOutput]]:
    """Greedy drafts for all prompts at once: prompt i decodes in KV sequence seq_base + i. Yields
    ``AnswerProgress("drafting", done, n)`` before the prefill (0 done) and whenever another draft
    finishes, and returns the drafts (``toks = yield from draft_steps(...)``).

    ``sources[i]``: the token sequences draft i must copy from when ``cfg.extractive`` (its
    subset's chunks, ``chunk_tokens``); None drafts freely.

    Prefill shares KV: prompt i reuses the longest prefix it has in common with an earlier
    prompt (the instructions always; the first chunk too when two subsets start with the same
    chunk) by copying those cells (unified KV), so only its own remainder is decoded; see
    ``share_plan``. Then each step is one llama_decode holding the next token of every
    unfinished draft. Phases per draft: rationale (until a newline, "Answer", the end of a
    copied sentence, EOG or the token limit; at the limit it ends at its last sentence end, its
    KV cut back to it, or finishes its sentence within twice the limit) -> the forced tokens
    "\nAnswer:" -> answer (until EOG, a line break, or a sentence end: ``.``, ``!`` or ``?``
    followed by a token that starts with whitespace). An answer that reaches ``max_answer_tokens`` first, or that the repetition
    guard stops (``repetition``), is incomplete (``DrafterOutput.ended``): never cut mid-word into
    an answer, it is dropped by the pipeline. The stopping token is not part of the draft (nor of
    its log-probability).
    """
    n = len(prompts)
    yield AnswerProgress("drafting", 0, n)
    backend.reset()
    try:  # also when the consumer stops early (a generator closed mid-way): the KV cache is left empty
        seqs = [seq_base + i for i in range(n)]
        first = prefill_shared(backend, prompts, seqs)
        forced = backend.tokenize("\nAnswer:", add_special=False)
        newline = backend.tokenize("\n", add_special=False)[-1]
        copiers = [SpanCopy(sources[i]) if (cfg.extractive and sources) else None for i in range(n)]
        guards = [RepetitionGuard(repetition) if repetition is not None else None for _ in prompts]
        drafts = [DrafterOutput(prompt=list(p)) for p in prompts]
        decoded = [len(p) for p in prompts]  # tokens in each draft's KV sequence
        phase = ["rationale"] * n
        step = _Stepper(backend, cfg, forced, newline, max_answer_tokens)
        feed = [step.advance(drafts[i], phase, i, first[i], copiers[i], guards[i]) for i in range(n)]
        finished = 0
        while True:
            active = [i for i in range(n) if phase[i] != "done"]
            if n - len(active) > finished:
                finished = n - len(active)
                yield AnswerProgress("drafting", finished, n)
            if not active:
                return drafts
            entries = []
            for i in active:
                at = drafts[i].n_written - len(feed[i])  # the fed tokens are the draft's last ones
                if at < decoded[i]:  # its rationale was cut back to its last whole sentence
                    backend.seq_rm(seqs[i], at, -1)
                entries += [(t, at + j, seqs[i], j == len(feed[i]) - 1) for j, t in enumerate(feed[i])]
                decoded[i] = at + len(feed[i])
            rows = decode_rows(backend, entries)
            for r, i in enumerate(active):
                feed[i] = step.advance(drafts[i], phase, i, rows[r], copiers[i], guards[i])
    finally:
        backend.reset()


def prefill_shared(backend: BatchBackend, prompts: Sequence[list[int]], seqs: Sequence[int]) -> list[np.ndarray]:
    """Prefill prompt i into KV sequence seqs[i], sharing prefixes (``share_plan``); the logits row
    after each prompt's last token."""
    parent, shared, waves = share_plan(prompts)
    first: list[np.ndarray] = [np.empty(0)] * len(prompts)
    for wave in waves:  # one batched decode per wave of prompts (parents are always in earlier waves)
        entries = []
        for i in wave:
            if parent[i] >= 0:
                backend.seq_cp(seqs[parent[i]], seqs[i], 0, shared[i])
            rest = prompts[i][shared[i]:]
            entries += [(t, shared[i] + j, seqs[i], j == len(rest) - 1) for j, t in enumerate(rest)]
        for i, row in zip(wave, decode_rows(backend, entries), strict=True):
            first[i] = row
    return first


def share_plan(prompts: Sequence[Sequence[int]]) -> tuple[list[int], list[int], list[list[int]]]:
    """(parent, shared, waves): prompt i copies its first shared[i] tokens' KV from prompt parent[i]
    (-1: none) and decodes only the rest; waves group prompts whose parents are already decoded.

    shared[i] <= len(prompt i) - 1, so every prompt decodes at least its last token (its logits).
    """
    parent, shared, depth = [], [], []
    for i, p in enumerate(prompts):
        best, at = 0, -1
        for j in range(i):
            lcp = _common_prefix([p, prompts[j]])
            if lcp > best:
                best, at = lcp, j
        parent.append(at)
        shared.append(min(best, len(p) - 1) if at >= 0 else 0)
        depth.append(depth[at] + 1 if at >= 0 else 0)
    waves = [[i for i in range(len(prompts)) if depth[i] == d] for d in range(max(depth, default=-1) + 1)]
    return parent, shared, waves


@dataclass(frozen=True)
class _Stepper:
    """Picks a draft's next token from its logits row, moves its phase, says what to feed next."""

    backend: BatchBackend
    cfg: GroundedConfig
    forced: list[int]
    newline: int
    max_answer_tokens: int

    def pick(self, row: np.ndarray, copier: SpanCopy | None, may_stop: bool) -> int | None:
        """The greedy token; with a copier, the argmax over span continuations and (when the
        draft may stop) the newline. None = stop: the drafter's own argmax is end-of-generation,
        or no span continues."""
        top = int(np.argmax(row))
        if copier is None:
            return top
        if may_stop and self.backend.is_eog(top):
            return None
        allowed = copier.next_tokens() | ({self.newline} if may_stop else set())
        return max(allowed, key=lambda t: row[t]) if allowed else None

    def advance(self, d: DrafterOutput, phase: list[str], i: int, row: np.ndarray,
                copier: SpanCopy | None, guard: RepetitionGuard | None) -> list[int]:
        if phase[i] == "rationale":
            return self._rationale(d, phase, i, row, copier)
        tok = self.pick(row, copier, may_stop=bool(d.answer))
        piece = self._piece(tok)
        if tok is None or self.backend.is_eog(tok):
            return self._end(d, phase, i, "eog")
        if "\n" in piece:
            return self._end(d, phase, i, "line")
        if d.answer and piece[:1].isspace() and ends_sentence(d.answer_text):
            return self._end(d, phase, i, "sentence")  # the next word would start a second sentence
        if len(d.answer) >= self.max_answer_tokens:
            return self._end(d, phase, i, "limit")
        d.answer.append(tok)
        d.answer_lp.append(token_logprob(row, tok))
        d.answer_text += piece
        if guard is not None:
            guard.push(tok, d.answer_text)
            if guard.fired:
                return self._end(d, phase, i, "loop")
        if copier is not None:
            copier.take(tok)
            if ends_sentence(piece):  # the copied phrase ends a sentence
                return self._end(d, phase, i, "sentence")
        return [tok]

    def _rationale(self, d: DrafterOutput, phase: list[str], i: int, row: np.ndarray,
                   copier: SpanCopy | None) -> list[int]:
        tok = self.pick(row, copier, may_stop=bool(d.rationale))
        piece = self._piece(tok)
        if tok is None or self.backend.is_eog(tok) or "\n" in piece or "Answer" in d.rationale_text + piece:
            return self._start_answer(d, phase, i, copier)
        if len(d.rationale) >= self.cfg.rationale_tokens and self._ends_at_limit(d, piece):
            return self._start_answer(d, phase, i, copier)
        d.rationale.append(tok)
        d.rationale_lp.append(token_logprob(row, tok))
        d.rationale_text += piece
        if copier is not None:
            copier.take(tok)
            if ends_sentence(piece):  # a quoted sentence is complete
                return [tok] + self._start_answer(d, phase, i, copier)
        return [tok]

    def _ends_at_limit(self, d: DrafterOutput, next_piece: str) -> bool:
        """The rationale is at (or past) its token limit, ``next_piece`` still to come: True when it
        ends here (``rationale_end``), cut back to where it ends."""
        pieces = [self._piece(t) for t in d.rationale] + [next_piece]
        end = rationale_end(pieces, self.cfg.rationale_tokens)
        if end is None:
            return False
        keep, cut = end
        del d.rationale[keep:], d.rationale_lp[keep:]
        d.rationale_text = "".join(pieces[:keep])
        d.rationale_next = next_piece if cut else ""
        return True

    def _start_answer(self, d: DrafterOutput, phase: list[str], i: int, copier: SpanCopy | None) -> list[int]:
        phase[i] = "answer"
        d.forced = list(self.forced)
        if copier is not None:
            copier.restart()
        return list(self.forced)

    @staticmethod
    def _end(d: DrafterOutput, phase: list[str], i: int, why: str) -> list[int]:
        phase[i] = "done"
        d.ended = why
        return []

    def _piece(self, tok: int | None) -> str:
        return "" if tok is None else self.backend.token_bytes(tok).decode("utf-8", errors="replace")


def ends_sentence(text: str) -> bool:
    """The text ends a sentence: ``.``, ``!`` or ``?``, perhaps followed by closing quotes or brackets."""
    return text.rstrip().rstrip("\"')]}»”’").endswith((".", "!", "?"))


def rationale_end(pieces: Sequence[str], limit: int) -> tuple[int, bool] | None:
    """Where a rationale at (or past) its token limit ends; ``pieces``: its pieces and the one that
    comes next (last). It ends at its last sentence end: (pieces kept, False), cut back to it (else
    the drafter copies the cut sentence into its answer). Without one it runs on to finish its
    sentence (None), up to twice the limit, where it ends cut: (all but the next piece, True);
    ``shown_rationale`` then ends it in "…". The in-process drafter asks this token by token, the
    endpoint's (``localrag.grounded.remote``) of the pieces a server sent."""
    n = len(pieces) - 1
    for keep in range(n, 0, -1):
        if ends_sentence("".join(pieces[:keep])) and pieces[keep][:1].isspace():
            return keep, False
    return (n, True) if n >= 2 * limit else None


def shown_rationale(text: str, next_piece: str) -> str:
    """A rationale as shown: whole words; one its token limit cut mid-sentence (``next_piece``: the
    piece that came next, '' when it ended on its own) ends in "…"."""
    text = text.strip()
    if not next_piece or not text or ends_sentence(text):
        return text
    if next_piece[:1].isalnum():  # the limit fell inside a word: drop its start
        text = text.rsplit(None, 1)[0] if len(text.split()) > 1 else ""
    return text.rstrip(",;:-") + "…" if text else ""


def _common_prefix(seqs: Sequence[Sequence[int]]) -> int:
    n = 0
    for col in zip(*seqs, strict=False):
        if any(t != col[0] for t in col):
            break
        n += 1
    return n


def decode_rows(backend: BatchBackend, entries: list[tuple[int, int, int, bool]]) -> list[np.ndarray]:
    """Decode (token, pos, seq, want_logits) entries in n_batch-sized decodes; copies of the wanted rows."""
    rows: list[np.ndarray] = []
    step = backend.n_batch
    for start in range(0, len(entries), step):
        part = entries[start : start + step]
        toks, poss, seqs, outs = zip(*part, strict=True)
        view = backend.decode_batch(toks, poss, seqs, outs)
        rows += [np.array(view[j]) for j in range(view.shape[0])]
    return rows
