"""Fast unit tests of the decoding helpers: text assembly, sampling maths, tree layout."""

from __future__ import annotations

import numpy as np
import pytest

from localrag.backends.llamacpp import tree_layout
from localrag.config import GenerationConfig
from localrag.generation import Sampler, TextAssembler


def feed_all(asm: TextAssembler, pieces: list[bytes]) -> str:
    out = "".join(asm.feed(p) for p in pieces)
    return out + asm.finish()


def test_assembler_keeps_multibyte_characters_whole():
    text = "héllo 世界 🙂 ok"
    data = text.encode()
    pieces = [data[i : i + 1] for i in range(len(data))]  # worst case: one byte per token
    asm = TextAssembler()
    emitted = [asm.feed(p) for p in pieces]
    assert all("\ufffd" not in e for e in emitted)
    assert "".join(emitted) + asm.finish() == text


def test_assembler_cuts_at_stop_string_split_across_pieces():
    asm = TextAssembler(stop=("\nUser:",))
    out = feed_all(asm, [b"Paris is", b" nice.\nUs", b"er: next", b" question"])
    assert out == "Paris is nice."
    assert asm.stopped


def test_assembler_releases_held_text_that_was_not_a_stop():
    asm = TextAssembler(stop=("STOP",))
    assert feed_all(asm, [b"ST", b"OR", b"Y"]) == "STORY"
    assert not asm.stopped


def test_greedy_sampler_is_argmax():
    logits = np.array([0.1, 3.0, 2.9, -1.0], dtype=np.float32)
    assert Sampler(GenerationConfig(temperature=0.0)).pick(logits) == 1


def test_sampler_notes_the_log_probability_of_each_chosen_token():
    logits = np.log(np.array([0.5, 0.3, 0.2]))
    s = Sampler(GenerationConfig(temperature=0.0))
    assert s.pick(logits + 4.0) == 0  # log softmax: a constant shift changes nothing
    s.note(logits, 2)  # a token another step chose (a verified tree's)
    assert s.logprobs == pytest.approx([np.log(0.5), np.log(0.2)])
    hot = Sampler(GenerationConfig(temperature=5.0, top_k=1, seed=3))
    hot.pick(logits)  # the model's own distribution, before temperature and top-k
    assert hot.logprobs == pytest.approx([np.log(0.5)])


def test_top_k_and_top_p_restrict_support():
    logits = np.log(np.array([0.5, 0.3, 0.15, 0.05]))
    ids, probs = Sampler(GenerationConfig(temperature=1.0, top_k=3)).distribution(logits)
    assert set(ids.tolist()) == {0, 1, 2}
    assert probs.sum() == pytest.approx(1.0)
    ids, probs = Sampler(GenerationConfig(temperature=1.0, top_p=0.8)).distribution(logits)
    assert sorted(ids.tolist()) == [0, 1]  # 0.5 + 0.3 reaches 0.8
    assert probs.tolist() == pytest.approx([0.5 / 0.8, 0.3 / 0.8])


def test_seeded_sampling_is_reproducible_and_follows_distribution():
    logits = np.log(np.array([0.6, 0.3, 0.1]))
    draws = [Sampler(GenerationConfig(temperature=1.0, seed=7)).pick(logits) for _ in range(3)]
    assert len(set(draws)) == 1  # same seed, same first draw
    s = Sampler(GenerationConfig(temperature=1.0, seed=1))
    counts = np.bincount([s.pick(logits) for _ in range(6000)], minlength=3) / 6000
    assert counts == pytest.approx([0.6, 0.3, 0.1], abs=0.03)


def test_tree_layout_numbers_leaves_and_sequences():
    #      0
    #     / \
    #    1   2
    #   / \
    #  3   4
    depth, leaves_below, leaf_of, n_leaves = tree_layout([-1, 0, 0, 1, 1])
    assert depth == [0, 1, 1, 2, 2]
    assert n_leaves == 3  # nodes 2, 3, 4
    assert leaves_below[0] == [0, 1, 2]
    assert leaves_below[1] == [1, 2]
    assert leaves_below[2] == [0]
    assert leaf_of[3] == 1 and leaf_of[4] == 2


def test_tree_layout_rejects_child_before_parent():
    with pytest.raises(ValueError):
        tree_layout([-1, 2, 0])
