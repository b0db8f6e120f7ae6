"""How Grounded mode cuts a draft a server wrote (``localrag.grounded.remote``) by the in-process
drafter's rules: a rationale at its token limit ends at its last sentence end (else runs on to
finish its sentence, up to twice the limit, where it is cut), an answer at its first sentence end;
a stop string's token and a repeated prefill are no part of a draft. The real server's drafts:
tests/endpoint/test_endpoint_modes.py.

Run: .venv/bin/python -m pytest tests/grounded/test_remote_drafts.py -q
"""

from __future__ import annotations

from types import SimpleNamespace

from localrag.backends.endpoint import TokenLogprob
from localrag.grounded.drafting import rationale_end, shown_rationale
from localrag.grounded.remote import RATIONALE, _answer, _rationale, _tokens


def toks(*pieces: str) -> list[TokenLogprob]:
    return [TokenLogprob(p, -0.5) for p in pieces]


def text(tokens) -> str:
    return "".join(t.token for t in tokens)


def test_a_rationale_within_its_limit_is_kept_whole():
    got, nxt = _rationale(toks(" It", " is", " red", "."), limit=8)
    assert text(got) == " It is red." and nxt == ""


def test_a_rationale_past_its_limit_ends_at_its_last_sentence_end_within_it():
    pieces = toks(" A", " b", ".", " C", " d", ".", " E", " f", " g", " h", ".", " I")
    got, nxt = _rationale(pieces, limit=7)
    assert text(got) == " A b. C d." and nxt == ""


def test_a_rationale_without_a_sentence_end_runs_on_to_finish_its_sentence():
    pieces = toks(" a", " b", " c", " d", " e", ".", " F", " g")
    got, nxt = _rationale(pieces, limit=3)
    assert text(got) == " a b c d e." and nxt == ""


def test_a_rationale_without_a_sentence_end_is_cut_at_twice_its_limit_and_shown_so():
    pieces = toks(" one", " two", " thr", "ee", " four", " five")
    got, nxt = _rationale(pieces, limit=2)  # cut after 4 pieces, " four" next
    assert text(got) == " one two three" and nxt == " four"
    assert shown_rationale(text(got), nxt) == "one two three…"
    got, nxt = _rationale(toks(" one", " thr", "ee", " four"), limit=1)  # cut inside a word
    assert text(got) == " one thr" and nxt == "ee" and shown_rationale(text(got), nxt) == "one…"


def test_the_remote_cut_is_the_in_process_rule_asked_at_every_length():
    """``_rationale`` asks ``rationale_end`` as the in-process drafter does before each next piece:
    every limit, every length of what the server sent, sentence ends early, late and never."""
    def in_process(pieces: list[str], limit: int) -> tuple[str, str]:
        kept: list[str] = []
        for piece in pieces:  # the drafter's loop: at the limit, ask before taking the next piece
            if len(kept) >= limit and (end := rationale_end([*kept, piece], limit)) is not None:
                return "".join(kept[:end[0]]), piece if end[1] else ""
            kept.append(piece)
        return "".join(kept), ""

    for pieces in ([" x", " y", " z.", " w", " v", " u", " t", " s"], [" a", " b", " c", " d", " e.", " F", " g"],
                   [" one", " two", " thr", "ee", " four", " five", " six"], [" P.", " Q.", " R", " S.", " T"]):
        for n in range(1, len(pieces) + 1):
            for limit in range(1, n + 1):
                got, nxt = _rationale(toks(*pieces[:n]), limit)
                assert (text(got), nxt) == in_process(pieces[:n], limit), (pieces[:n], limit)


def test_an_answer_ends_at_its_first_sentence_end_and_one_past_its_limit_is_incomplete():
    got, ended = _answer(toks(" Gustave", " Eiffel", ".", " He", " was"), stopped=False, limit=8)
    assert text(got) == " Gustave Eiffel." and ended == "sentence"
    got, ended = _answer(toks(" 1", ".", "5", " m"), stopped=True, limit=8)  # "1.5": no sentence end
    assert text(got) == " 1.5 m" and ended == "eog"
    got, ended = _answer(toks(" a", " b", " c", " d"), stopped=False, limit=3)
    assert text(got) == " a b c" and ended == "limit"
    assert _answer(toks(" a", " b"), stopped=False, limit=8)[1] == "limit"  # the server ran out of tokens


def test_a_stop_strings_token_and_a_repeated_prefill_are_no_part_of_the_draft():
    g = SimpleNamespace(text=" It is red.", logprobs=toks(" It", " is", " red", ".\n"))  # stopped at "\n"
    assert text(_tokens(g, RATIONALE)) == " It is red"
    echoed = SimpleNamespace(text=RATIONALE + " It is.", logprobs=toks("Rat", "ionale", ":", " It", " is", "."))
    assert text(_tokens(echoed, RATIONALE)) == " It is."
    only_new = SimpleNamespace(text=RATIONALE + " It is.", logprobs=toks(" It", " is", "."))
    assert text(_tokens(only_new, RATIONALE)) == " It is."
    no_logprobs = SimpleNamespace(text=" It is red.", logprobs=None)
    assert [t.token for t in _tokens(no_logprobs, RATIONALE)] == [" It", " is", " red."]
