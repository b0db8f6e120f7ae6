"""Speedup's per-step breakdown (``RasdDecoder.record_steps``, ``bench speed --breakdown``): the
summary's arithmetic (unit) and, on SmolLM2, that the step log accounts for every token and that
what the datastore held is judged against the answer the model wrote."""

from __future__ import annotations

import pytest

from localrag.bench.speed import copyable, run_generation
from localrag.bench.speed_peer import parse_peer_output
from localrag.bench.speed_runs import MethodRuns, Run, SpeedRow, SuiteRuns
from localrag.bench.speed_steps import copy_runs, match_class_acceptance, step_rows, summarise_breakdown
from localrag.config import GenerationConfig, RasdConfig
from localrag.rasd import RasdDecoder
from localrag.rasd.budget import CostModel
from localrag.results import RasdStats, StepRecord


def _step(start, size=0, accepted=0, held=0, match_len=0, top_ok=None, unique=False, verify_s=0.01,
          between_s=0.002):
    return StepRecord(start=start, size=size, depth=min(size, accepted + 1) if size else 0, accepted=accepted,
                      verify_s=verify_s, between_s=between_s, match_len=match_len, held=held, top_ok=top_ok,
                      unique=unique).__dict__


def test_copy_runs_count_copyable_tokens_in_a_row():
    assert copy_runs([True, True, False, True, False]) == [2, 1, 0, 1, 0]
    assert copy_runs([]) == []


def test_breakdown_sums_our_steps_and_counts_one_token_steps_over_a_held_match():
    # answer: 1 prefill token, then steps emitting 1, 3, 1, 1, 2 tokens (9 tokens in all)
    steps = [_step(1, held=2, match_len=3), _step(2, size=4, accepted=2, held=2, match_len=5),
             _step(5, size=2, accepted=0, held=0), _step(6, held=0), _step(7, size=3, accepted=1, held=3)]
    flags = [False, True, False, False, False, True, False, False, True]
    rows = step_rows(steps, flags)
    assert [r["copy_run"] for r in rows] == [1, 0, 1, 0, 0]
    plain = MethodRuns([Run(decode_s=1.0, tokens=[0] * 9)])
    ours = MethodRuns([Run(decode_s=0.5, tokens=[0] * 9)], steps=rows)
    lookup = MethodRuns([Run(decode_s=0.4, n=17, stats={"n_draft": 3, "n_drafted": 12, "n_accept": 5})])
    result = SuiteRuns([SpeedRow(0, 10, {"plain": plain, "rasd": ours, "llama-lookup": lookup})],
                       {"max_abs_logit_diff": 0.0, "max_margin_diff": 0.0})
    b = summarise_breakdown(result, ["plain", "rasd", "llama-lookup"])
    assert set(b) == {"rasd", "llama-lookup"}  # plain records no steps
    r = b["rasd"]
    assert (r["steps"], r["tree_steps"], r["plain_steps"], r["tokens"]) == (5, 3, 2, 8)
    assert (r["drafted"], r["accepted"]) == (9, 3) and r["accept_rate"] == pytest.approx(3 / 9)
    assert r["tokens_per_forward"] == pytest.approx(8 / 5) and r["tree_size_median"] == 3
    # one-token steps: at 1 (held 2: missed), 5 and 6 (held nothing); the copy bound allowed more at 1 and 5
    assert (r["missed_steps"], r["missed_tokens"], r["copy_missed_steps"]) == (1, 2, 2)
    assert r["held_not_taken"] == 2 + 0 + 2  # step 1: 2 of 2, step 7: 3 held, 1 taken
    assert r["between_share"] == pytest.approx(0.002 / 0.012)
    # the peer's own counts: 17 tokens, 5 of them accepted drafts -> 12 forwards in 0.4 s
    p = b["llama-lookup"]
    assert (p["drafted"], p["accepted"], p["n_draft"]) == (12, 5, 3) and p["accept_rate"] == pytest.approx(5 / 12)
    assert p["tokens_per_forward"] == pytest.approx(17 / 12) and p["ms_per_forward"] == pytest.approx(400 / 12)


def test_a_peers_printed_counts_feed_its_breakdown():
    stderr = ("I decoded   17 tokens in    0.782 seconds, speed:   21.727 t/s\nI n_draft      = 3\n"
              "I n_drafted    = 12\nI n_accept     = 5\n")
    run = parse_peer_output("The capital of France is Paris", stderr, "The capital of France is")
    assert (run.n_drafted, run.n_accept, run.n_tokens) == (12, 5, 17)


def test_match_class_acceptance_is_per_class_and_unique_continuations_apart():
    steps = [_step(1, match_len=1, top_ok=True, unique=True), _step(2, match_len=1, top_ok=False, unique=False),
             _step(3, match_len=5, top_ok=True, unique=True), _step(4, match_len=6, top_ok=False, unique=True),
             _step(5, match_len=20, top_ok=True, unique=False), _step(6)]
    t = match_class_acceptance(steps)
    assert list(t) == ["1", "2", "3", "4-7", "8-15", "16+"]
    assert (t["1"]["unique_trials"], t["1"]["unique_accepted"], t["1"]["trials"], t["1"]["accepted"]) == (1, 1.0, 2, 0.5)
    assert t["4-7"]["unique_accepted"] == 0.5 and t["2"]["trials"] == 0 and t["2"]["accepted"] is None
    assert t["16+"]["unique_trials"] == 0 and t["16+"]["accepted"] == 1.0


def test_stats_with_a_step_log_read_back_typed():
    st = RasdStats(steps=1, step_log=[StepRecord(1, 2, 2, 1, 0.01, 0.001, 4, 2, True, True)])
    back = RasdStats.from_dict(st.to_dict())
    assert back.step_log == st.step_log and isinstance(back.step_log[0], StepRecord)


# --------------------------------------------------------------------------- real model
DOC = ("The Normans were the people who in the 10th and 11th centuries gave their name to Normandy, "
       "a region in France. They were descended from Norse raiders and pirates from Denmark, Iceland and "
       "Norway who, under their leader Rollo, agreed to swear fealty to King Charles III of West Francia.")


def _run(engine, config, cost, max_tokens=40):
    dec = RasdDecoder(engine.backend, config, cost=cost, documents=[DOC])
    dec.record_steps = True
    ids = engine.encode_prompt(engine.prompt.render([{"role": "user", "content": "Repeat this passage exactly:\n"
                                                                                   + DOC}]))
    run = run_generation(engine, ids, GenerationConfig(max_tokens=max_tokens, stop=engine.prompt.stop), dec)
    return dec, run, ids


def _occurs(seq, sources) -> bool:
    n = len(seq)
    return any(list(src[i:i + n]) == list(seq) for src in sources for i in range(len(src) - n + 1))


@pytest.mark.slow
def test_the_step_log_accounts_for_every_token_of_the_answer(smollm2_engine):
    """Trees every step (no budget): each step's record, and what its lookup held, against the answer."""
    engine = smollm2_engine
    dec, run, ids = _run(engine, RasdConfig(use_budget=False, calibrate=False), CostModel.linear())
    st, log = dec.stats, dec.stats.step_log
    assert len(log) == st.steps == len(st.accepted_per_step) and st.spec_steps > 0
    assert [s.accepted + 1 for s in log] == st.accepted_per_step
    # the first token comes from the prefill; every step emits its accepted tokens and one more
    assert len(run.tokens) == 40 and 1 + sum(s.accepted + 1 for s in log) == len(run.tokens)
    assert [s.start for s in log] == [1 + sum(x.accepted + 1 for x in log[:i]) for i in range(len(log))]
    assert sum(s.accepted for s in log) == len(run.tokens) - 1 - st.steps > 0  # the copy was verified in trees
    doc = engine.backend.tokenize(DOC, add_special=False, parse_special=False)
    for s in log:
        assert s.accepted <= s.depth <= s.size
        # retrieval alone: what a step accepted is a path of its lookup, so the lookup held at least that
        assert s.held >= s.accepted
        if s.held:  # and what it held is the answer's own next tokens, copied from the sources
            assert _occurs(run.tokens[s.start:s.start + s.held], [doc, ids + run.tokens[:s.start]])
    assert sum(s.verify_s + s.between_s for s in log) <= run.decode_s


@pytest.mark.slow
def test_plain_steps_over_a_held_copy_are_counted_as_missed(smollm2_engine):
    """A verify cost far above plain's (and no probe): every step is plain, and the steps where the
    datastore held the passage the model was repeating are the missed ones. Each step records what
    its plan had to clear and the T(1) it planned with."""
    engine = smollm2_engine
    config = RasdConfig(calibrate=False, probe_every=10**6, min_gain=1.25)
    dec, run, ids = _run(engine, config, CostModel.linear(0.01, 0.05))
    log = dec.stats.step_log
    assert len(run.tokens) == 40 and dec.stats.spec_steps == 0 and all(s.size == s.accepted == 0 for s in log)
    missed = [s for s in log if s.held >= 1]
    assert len(missed) > len(log) // 2  # the answer repeats the document
    doc = engine.backend.tokenize(DOC, add_special=False, parse_special=False)
    flags = copyable([doc, ids], run.tokens)
    for s in missed:
        assert s.top_ok is not None and s.match_len >= 1
        assert _occurs(run.tokens[s.start:s.start + s.held], [doc, ids + run.tokens[:s.start]])
        assert flags[s.start]  # a held continuation is copyable by the copy bound's pairs
    for s in log:
        if s.top_ok:  # the lookup's favourite first token was the answer's: it held at least that one
            assert s.held >= 1
    assert all(s.need == 1.25 for s in log)  # min_gain / realism, and no bet was made to move realism
    # T(1) as planned: the guessed 10 ms at the first step, then corrected by every plain forward
    assert log[0].t1_ms == pytest.approx(10.0) and len({s.t1_ms for s in log}) > 1
