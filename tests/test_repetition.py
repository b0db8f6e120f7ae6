"""The repetition guard (``localrag.repetition``): fast unit tests on hand-made token streams, then
the guard inside ``Generation`` on the real bundled model, where Speedup must stop exactly where
Plain stops.

Run: .venv/bin/python -m pytest tests/test_repetition.py -q
"""

from __future__ import annotations

import pytest

from localrag.config import GenerationConfig, RasdConfig, RepetitionConfig
from localrag.rasd import RasdDecoder
from localrag.rasd.budget import CostModel
from localrag.repetition import RepetitionGuard, normalise_sentence

DEFAULT = RepetitionConfig()


def feed(pieces: list[str], config: RepetitionConfig = DEFAULT) -> tuple[RepetitionGuard, list[str]]:
    """Push one token per piece (equal pieces are equal tokens); the text shown after each push."""
    guard, vocab, text, shown = RepetitionGuard(config), {}, "", []
    for piece in pieces:
        text += piece
        guard.push(vocab.setdefault(piece, len(vocab)), text)
        shown.append(text[:guard.hold])
        if guard.fired:
            break
    return guard, shown


def words(text: str) -> list[str]:
    """A text as word tokens, each with its leading space (as a BPE vocabulary splits prose)."""
    return [w if i == 0 else " " + w for i, w in enumerate(text.split(" "))]


def test_a_sentence_written_again_ends_the_answer_before_it():
    guard, shown = feed(words("The tower is 330 metres tall. The tower is 330 metres tall. The tower"))
    assert guard.pattern == "sentence"
    assert guard.text[:guard.cut] == "The tower is 330 metres tall. "
    assert shown[-1] == "The tower is 330 metres tall. "
    assert all(not s.startswith("The tower is 330 metres tall. The") for s in shown)  # the repeat was never shown


def test_a_sentence_repeated_later_also_counts():
    guard, _ = feed(words("Paris is the capital. It has many museums. Paris is the capital. More"))
    assert guard.pattern == "sentence"
    assert guard.text[:guard.cut] == "Paris is the capital. It has many museums. "


def test_a_repeated_list_item_is_cut_with_its_number():
    pieces = ["1.", " Apples", " are", " red", ".\n", "2.", " Pears", " are", " green", ".\n",
              "3.", " Apples", " are", " red", ".\n", "4."]
    guard, _ = feed(pieces)
    assert guard.text[:guard.cut] == "1. Apples are red.\n2. Pears are green.\n"


def test_normal_prose_and_lists_are_not_cut():
    text = ("The report has three parts. The first part covers the budget. The second part covers the staff. "
            "The third part covers the buildings, and the budget again in short. In short: it is fine.")
    guard, shown = feed(words(text))
    assert not guard.fired and shown[-1] == text
    items = ["- Install the package.\n", "- Run the tests.\n", "- Run the app.\n", "- Read the logs.\n"]
    guard, shown = feed([w for item in items for w in words(item)])
    assert not guard.fired and shown[-1] == "".join(items)


def test_short_sentences_may_repeat():
    guard, _ = feed(words("Yes. It is. Yes. It is. Done."))
    assert not guard.fired  # fewer than min_words words: "Yes.", "It is."


def test_repeated_lines_of_code_in_a_fence_are_not_cut():
    pieces = ["```python\n", "for", " i", " in", " range(n):\n", "    x", " +=", " 1\n",
              "for", " i", " in", " range(n):\n", "    y", " +=", " 1\n", "```\n"]
    guard, shown = feed(pieces)
    assert not guard.fired and shown[-1] == "".join(pieces)


def test_a_span_looping_without_punctuation_is_cut_after_its_first_copy():
    pieces = ["The", " Saint", "-", "Sorbonne"] + ["-", "Sorbonne"] * 12
    guard, shown = feed(pieces)
    assert guard.pattern == "span"
    assert guard.text[:guard.cut] == "The Saint-Sorbonne"
    # 16 tokens of repetition (min_span): fired on the 16th repeated token, nothing after the cut shown
    assert len(shown) == 4 + 16 and shown[-1] == "The Saint-Sorbonne"


def test_a_long_span_repeated_once_is_cut():
    span = [f" w{i}" for i in range(20)]  # 20 distinct tokens, no punctuation, repeated back to back
    guard, _ = feed(span + span + span[:3])
    assert guard.pattern == "span"
    assert guard.text[:guard.cut] == "".join(span)


def test_a_shorter_repeat_than_the_span_needs_does_not_fire():
    span = [f" w{i}" for i in range(20)]
    guard, shown = feed(span + span[:19] + [" other", " end"])
    assert not guard.fired
    assert shown[-1] == "".join(span + span[:19] + [" other", " end"])  # held text released once broken


def test_normalised_sentences_ignore_case_spacing_and_list_markers():
    assert normalise_sentence("2.  The  Answer is X.") == normalise_sentence("- the answer is x.") == "the answer is x."


# ------------------------------------------------------------------ the real model
LOOP_PROMPT = "red blue green. red blue green. red blue green. red blue green. red blue green. red blue"


@pytest.mark.slow
def test_generation_stops_at_the_loop_and_speedup_stops_at_the_same_token(smollm2_engine):
    engine = smollm2_engine
    cfg = GenerationConfig(max_tokens=64)
    plain = engine.complete(LOOP_PROMPT, cfg)
    pieces = list(plain)
    assert plain.stats.stop_reason == "repetition"
    assert "".join(pieces) == plain.text  # what was streamed is the answer, the repeat never shown
    assert plain.stats.generated_tokens < 64
    assert plain.text.count("red blue green.") <= 1  # the answer's first copy at most, then it stops
    unguarded = engine.complete(LOOP_PROMPT, cfg.with_(repetition=None)).run()
    assert unguarded.stats.stop_reason == "length" and unguarded.text.startswith(plain.text)
    assert len(unguarded.text) > len(plain.text)

    dec = RasdDecoder(engine.backend, RasdConfig(use_budget=False, calibrate=False), cost=CostModel.linear())
    dec.set_documents([LOOP_PROMPT])
    fast = engine.complete(LOOP_PROMPT, cfg, decoder=dec)
    fast_pieces = list(fast)
    assert fast.text == plain.text and "".join(fast_pieces) == fast.text
    assert fast.tokens == plain.tokens and fast.stats.stop_reason == "repetition"
    assert dec.stats.mean_accepted > 1.0  # speculation really copied the loop


def test_a_last_sentence_repeating_an_earlier_one_is_cut_at_the_end():
    """Found in a real browser (SmolLM2 over the shared-mime-info spec): "The document was last
    updated in 2020." twice, then end-of-text. The end ends the last sentence, so it is checked too."""
    guard, shown = feed(words("The spec is version 0.21. The document was last updated in 2020. "
                              "The document was last updated in 2020."))
    assert not guard.fired and shown[-1].rstrip() == "The spec is version 0.21. The document was last updated in 2020."
    guard.finish()
    assert guard.pattern == "sentence"
    assert guard.text[:guard.cut] == "The spec is version 0.21. The document was last updated in 2020. "


def test_a_template_repeated_with_a_counter_is_a_loop():
    """Found in a real browser (zlib's docs): "The compression level in deflate is 1, ... is 2, ..."
    up to the token limit. Sentences that differ only by their numbers, or one sentence repeating
    a span with a counter, are loops; the copies before the one that made it a loop stay."""
    guard, shown = feed(words("The compression level in deflate is 1. The compression level in deflate is 2. "
                              "The compression level in deflate is 3. The compression"))
    assert guard.pattern == "template"
    kept = "The compression level in deflate is 1. The compression level in deflate is 2. "
    assert guard.text[:guard.cut] == kept and all(kept.startswith(s) or s.startswith(kept) for s in shown)
    assert "is 3" not in shown[-1]  # the third copy was held back, never shown
    pieces = []
    for n in range(1, 8):
        pieces += [" the", " compression", " level", " in", " deflate", " is", f" {n}", ","]
    guard, shown = feed(pieces)
    assert guard.pattern == "span" and guard.text[:guard.cut].count("is ") == 2
    assert shown[-1].count("is ") <= 2


def test_lists_of_numbers_and_different_steps_are_not_templates():
    primes = [" 2", ",", " 3", ",", " 5", ",", " 7", ",", " 11", ",", " 13", ",", " 17", ",", " 19", ",", " 23", ",",
              " 29", ",", " 31", ","]
    guard, _ = feed(["The", " primes", " are", *primes])
    guard.finish()
    assert not guard.fired
    guard, _ = feed(words("Level 1 is the fastest. Level 6 is the default. Level 9 compresses best. "
                          "Level 0 stores the data as it is."))
    guard.finish()
    assert not guard.fired
