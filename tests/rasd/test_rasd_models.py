"""RASD on real bundled models (llama.cpp): lossless greedy, target-as-draft, KV consistency,
vocabulary check, CLI. The backend is deterministic (``ModelConfig.deterministic``), so greedy
RASD equals plain token for token, and every logit it picked a token from has plain's bits
(``bench.speed.verify_noise`` is 0). Real-length chat prompts: ``tests/test_determinism.py``."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import numpy as np
import pytest

from localrag.bench.speed import MarginRecorder, run_generation, verify_noise
from localrag.config import GenerationConfig, RasdConfig
from localrag.generation import Generation
from localrag.models import ModelError
from localrag.rasd import RasdDecoder, load_draft
from localrag.rasd.budget import CostModel

pytestmark = pytest.mark.slow

DOC = (
    "The Normans were the people who in the 10th and 11th centuries gave their name to Normandy, "
    "a region in France. They were descended from Norse raiders and pirates from Denmark, Iceland and "
    "Norway who, under their leader Rollo, agreed to swear fealty to King Charles III of West Francia. "
    "Through generations of assimilation and mixing with the native Frankish and Roman-Gaulish "
    "populations, their descendants would gradually merge with the Carolingian-based cultures of West Francia."
)
PROMPTS = [
    (
        "Answer using only the document; quote it.\n\nDocument:\n"
        + DOC
        + "\n\nQuestion: Who were the Normans descended from?",
        [DOC],
    ),
    ("Repeat this passage exactly:\n" + DOC, []),
    ("Write a short poem about the sea.", []),
]
CHEAP = CostModel.linear()  # tests force trees; no need to time the machine


def _chat_ids(engine, text):
    return engine.encode_prompt(engine.prompt.render([{"role": "user", "content": text}]))


def _plain(engine, ids, cfg):
    """Plain greedy output, with its top-2 margins and the logits each token was picked from."""
    rec = {"margins": [], "top2": [], "logits": []}
    rec["tokens"] = run_generation(engine, ids, cfg, MarginRecorder(rec, cfg.max_tokens)).tokens
    return rec


def _run_recorded(engine, ids, cfg, dec, rec):
    """The speculative run, and the batched-vs-single noise it showed before any divergence."""
    dec.record_logits = []
    got = run_generation(engine, ids, cfg, dec).tokens
    noise = verify_noise(rec, dec.record_logits, got)["max_abs_logit_diff"]
    dec.record_logits = None
    return got, noise


@pytest.mark.parametrize("config", [RasdConfig(use_budget=False, calibrate=False),
                                    RasdConfig(use_budget=True, calibrate=False),
                                    RasdConfig(calibrate=False, copy_runs=True)],
                         ids=["no-budget", "budget", "copy-runs"])
def test_greedy_rasd_equals_plain(smollm2_engine, config):
    """Greedy Speedup emits plain's tokens, picked from plain's logits bit for bit, with or without the
    budget; copy_runs (phases.estimate) changes which nodes are verified, never what is emitted. On
    the copy prompt, trees were verified and accepted past the bonus token (a silent fall-back to
    plain decoding fails here)."""
    engine = smollm2_engine
    dec = RasdDecoder(engine.backend, config, cost=CHEAP)
    cfg = GenerationConfig(max_tokens=48, stop=engine.prompt.stop)
    for text, docs in PROMPTS:
        ids = _chat_ids(engine, text)
        rec = _plain(engine, ids, cfg)
        dec.set_documents(docs)
        got, noise = _run_recorded(engine, ids, cfg, dec, rec)
        assert got == rec["tokens"], text
        assert noise == 0.0  # the verified rows are plain's logits, bit for bit
        st = dec.stats
        if text.startswith("Repeat"):  # a copy: trees were verified, and accepted past the bonus token
            assert st.spec_steps > 0 and st.mean_accepted > 1.5, (st.spec_steps, st.mean_accepted)
            assert st.tokens > st.steps  # drafted tokens were accepted
            if config.copy_runs:  # a fresh calibrator still verifies the passage in trees of several nodes
                assert st.tree_size_max > 1


def test_probe_schedule_outlives_an_answer(smollm2_engine, smollm2_draft):
    """Where speculation never pays on its own (verify cost k x one token), only forced probes
    verify, each doubling the wait before the next; the next answer continues that schedule
    instead of paying its first probes again. (A draft model's probes: with retrieval alone, see
    the next test.)"""
    engine = smollm2_engine
    config = RasdConfig(calibrate=False, probe_every=2, use_retrieval=False, draft_chain=True)
    # the curve stays linear: the budget's online correction would learn this machine's real verify
    # costs from the probes, and where a tree of 2 costs less than 2 plain steps (an AVX2 build pads
    # a forward's rows to 4 anyway), speculation then pays on its own and the premise is gone
    cost = CostModel.linear(0.01, 0.01)
    cost.observe = lambda k, seconds, rate=0.1: None
    dec = RasdDecoder(engine.backend, config, draft=smollm2_draft, cost=cost)
    cfg = GenerationConfig(max_tokens=32, stop=engine.prompt.stop)
    ids = _chat_ids(engine, "Write a short poem about the sea and the sea wind.")
    run_generation(engine, ids, cfg, dec)
    first = dec.stats.probe_steps
    assert first == dec.stats.spec_steps >= 2
    assert dec._probe_wait == min(config.probe_every * 2**first, 8 * config.probe_every)
    run_generation(engine, ids, cfg, dec)
    assert dec.stats.probe_steps < first


def test_a_draft_that_has_not_paid_sits_answers_out_until_its_probe(smollm2_engine, smollm2_draft):
    """A draft model whose steps have not paid lately (the bandit's arm behind) does not even read
    the next answer's prompt: that answer is plain-fast from its first word, and says so. Its
    skipped steps still count; once a probe is due, it waits for an answer whose prompt the
    target reads as well (not a Regenerate, which the target answers from its cache), whose
    prefill then reads the prompt into the draft, and whose first step runs it. Every answer
    equals plain's."""
    engine = smollm2_engine
    config = RasdConfig(calibrate=False, probe_every=8, use_retrieval=False, draft_chain=True)
    dec = RasdDecoder(engine.backend, config, draft=smollm2_draft, cost=CHEAP)
    arm = dec.budget.draft_arm
    arm.rate.update(draft=1.0, nodraft=100.0)  # the draft's steps ran at 1 token/s, plain's at 100
    cfg = GenerationConfig(max_tokens=12, stop=engine.prompt.stop)
    ids = _chat_ids(engine, PROMPTS[2][0])
    rec = _plain(engine, ids, cfg)
    smollm2_draft.reset()
    assert run_generation(engine, ids, cfg, dec).tokens == rec["tokens"]
    assert dec.stats.draft_idle and dec.stats.draft_steps == 0
    assert smollm2_draft.tokens == []  # the prompt was never read into the draft
    assert arm.skipped >= arm.wait == config.probe_every  # a probe is due
    regenerated = Generation(engine.backend, ids, dec, cfg).run()  # the target's cache holds the prompt
    assert regenerated.stats.reused_prompt_tokens >= len(ids) - 1 and regenerated.tokens == rec["tokens"]
    assert dec.stats.draft_idle and smollm2_draft.tokens == []  # the probe did not make it wait
    assert run_generation(engine, ids, cfg, dec).tokens == rec["tokens"]
    assert not dec.stats.draft_idle and dec.stats.draft_steps >= 1
    assert smollm2_draft.tokens[: len(ids)] == ids


def test_a_draft_that_cannot_repay_its_reading_leaves_the_prompt_unread(smollm2_engine, smollm2_draft):
    """Before its first step the draft arm stands at the most the cost curves allow; the draft
    reads a prompt only if its steps could win that reading back within an answer of typical
    length. Priced at a second a token, it sits the answer out (the prompt never read, the first
    words as soon as Plain's, the stats saying so); priced at a microsecond, the same question
    runs it. Both answers equal plain's."""
    engine = smollm2_engine
    config = RasdConfig(calibrate=False, use_retrieval=False, draft_chain=True)
    cfg = GenerationConfig(max_tokens=12, stop=engine.prompt.stop)
    ids = _chat_ids(engine, PROMPTS[2][0])
    rec = _plain(engine, ids, cfg)
    for read_s, reads in ((1.0, False), (1e-6, True)):
        dec = RasdDecoder(engine.backend, config, draft=smollm2_draft, cost=CHEAP)
        dec.draft.read_s = read_s
        smollm2_draft.reset()
        assert run_generation(engine, ids, cfg, dec).tokens == rec["tokens"]
        assert dec.stats.draft_idle is not reads and (dec.stats.draft_steps >= 1) is reads
        assert (smollm2_draft.tokens[: len(ids)] == ids) is reads
        if not reads:
            assert smollm2_draft.tokens == [] and "draft model idle" in " ".join(dec.stats.stats_parts())


def test_retrieval_learns_from_proposals_it_never_verifies(smollm2_engine):
    """Retrieval alone where no tree can pay (verify cost k x one token): nothing is verified, not
    even a probe, yet every lookup is scored against what the model then wrote. Copying a
    document, the buckets of long matches learn that they are accepted; the tokens match plain's."""
    engine = smollm2_engine
    dec = RasdDecoder(engine.backend, RasdConfig(calibrate=False, probe_every=2), cost=CostModel.linear(0.01, 0.01))
    cfg = GenerationConfig(max_tokens=40, stop=engine.prompt.stop)
    ids = _chat_ids(engine, PROMPTS[1][0])  # "Repeat this passage exactly"
    rec = _plain(engine, ids, cfg)
    assert run_generation(engine, ids, cfg, dec).tokens == rec["tokens"]
    assert dec.stats.spec_steps == 0 and dec.stats.plain_steps == dec.stats.steps
    cal = dec.calibrator
    long_matches = {k: v for k, v in cal.hits.items() if k[2] >= 5}  # 8+ token matches
    accepted, rejected = map(sum, zip(*long_matches.values(), strict=True))
    assert accepted >= 20 and accepted > 3 * rejected, cal.hits


def test_target_as_draft_accepts_every_drafted_token(smollm2_engine, smollm2_draft):
    engine = smollm2_engine
    config = RasdConfig(
        use_budget=False, use_retrieval=False, draft_chain=True, draft_depth=4, draft_nodes=4, calibrate=False
    )
    dec = RasdDecoder(engine.backend, config, draft=smollm2_draft, cost=CHEAP)
    cfg = GenerationConfig(max_tokens=40, stop=engine.prompt.stop)
    ids = _chat_ids(engine, PROMPTS[2][0])
    rec = _plain(engine, ids, cfg)
    got, noise = _run_recorded(engine, ids, cfg, dec, rec)
    assert got == rec["tokens"] and noise == 0.0
    drafted = dec.stats.drafted_by_source["draft"]
    assert drafted >= 20
    # the same model computes the same bits in either context, so the target accepts every drafted token
    assert dec.stats.accepted_by_source.get("draft", 0) == drafted, dec.stats


def test_speedup_estimate_comes_from_this_answers_own_steps(smollm2_engine):
    """The stats' "x vs plain" must not inherit a stale cost curve. This curve claims a plain
    forward takes 20x what it takes now (a curve timed under a load long gone), so no tree pays
    and every step is plain: the estimate is then about 1x, measured from the answer's own plain
    steps (the curve's T(1), corrected online over a short answer, would still say several x)."""
    engine, be = smollm2_engine, smollm2_engine.backend
    ids = _chat_ids(engine, PROMPTS[2][0])
    be.reset()
    logits = be.prefill(ids)
    t0 = time.perf_counter()
    for _ in range(3):
        logits = be.decode_one(int(np.argmax(logits)))
    stale = 20 * (time.perf_counter() - t0) / 3
    dec = RasdDecoder(be, RasdConfig(calibrate=False), cost=CostModel.linear(stale, stale))
    run_generation(engine, ids, GenerationConfig(max_tokens=12), dec)
    st = dec.stats
    assert st.plain_steps == st.steps >= 8 and st.mean_accepted == 1.0
    assert st.speedup_method == "plain steps"
    # Plain's token time is the median of this answer's own plain forwards, not the curve's T(1)
    own = float(np.median(dec._plain_forward_s))
    assert len(dec._plain_forward_s) == st.plain_steps and st.t1_ms == pytest.approx(own * 1e3)
    assert st.speedup_vs_plain == pytest.approx(st.tokens * own / st.decode_busy_s)


def _kv_clean(be) -> None:
    """Sequence 0 holds exactly the committed tokens; no tree branch survives in other sequences."""
    import llama_cpp as lc

    assert lc.llama_memory_seq_pos_max(be._mem, 0) == be.n_past - 1
    for s in range(1, be.max_leaves):
        assert lc.llama_memory_seq_pos_max(be._mem, s) == -1, f"sequence {s} still holds cells"


def test_no_draft_past_the_answers_length(smollm2_engine, smollm2_draft):
    """Generation tells the decoder how many tokens the answer can still take: the last step drafts
    only what it can emit (4-token chains, all accepted: 1 + 5 + 5 tokens would overshoot 8)."""
    engine = smollm2_engine
    config = RasdConfig(
        use_budget=False, use_retrieval=False, draft_chain=True, draft_nodes=4, calibrate=False
    )
    dec = RasdDecoder(engine.backend, config, draft=smollm2_draft, cost=CHEAP)
    cfg = GenerationConfig(max_tokens=8)
    ids = _chat_ids(engine, PROMPTS[2][0])
    run_generation(engine, ids, cfg, dec)
    assert 1 + sum(dec.stats.accepted_per_step) <= 8
    assert dec.stats.drafted_by_source["draft"] <= 6, dec.stats  # 4 + 2: the second chain stops at the limit


def test_kv_consistent_with_fresh_prefill_across_steps_and_turns(smollm2_engine, smollm2_draft):
    engine = smollm2_engine
    be = engine.backend
    config = RasdConfig(use_budget=False, calibrate=False)
    dec = RasdDecoder(be, config, cost=CHEAP, documents=[DOC])
    messages = [{"role": "user", "content": PROMPTS[0][0]}]
    total_steps = 0
    for turn in range(3):
        gen = engine.chat(messages, GenerationConfig(max_tokens=40), decoder=dec).run()
        total_steps += dec.stats.steps
        _kv_clean(be)
        messages += [
            {"role": "assistant", "content": gen.text},
            {"role": "user", "content": ["Say more.", "Quote it again.", "Thanks"][turn]},
        ]
        # the committed KV gives the same next-token logits as a fresh prefill of the same tokens
        probe = be.tokenize(" The", add_special=False)[0]
        ctx = list(be.tokens)
        got = np.array(be.decode_one(probe))
        be.truncate(len(ctx))
        fresh = smollm2_draft
        fresh.reset()
        want = np.array(fresh.prefill(ctx + [probe]))
        fresh.reset()
        assert np.array_equal(got, want)
    assert total_steps >= 12
    assert dec.stats.spec_steps > 0


def test_vocab_mismatch_is_a_clear_error(smollm2):
    with pytest.raises(ModelError, match="vocabulary"):
        load_draft(smollm2, "gemma3-270m")


def test_cli_generate_rasd_json(tmp_path):
    doc = tmp_path / "doc.txt"
    doc.write_text(DOC)
    cmd = [
        sys.executable,
        "-m",
        "localrag",
        "generate",
        "--mode",
        "rasd",
        "--docs",
        str(doc),
        "--max-tokens",
        "24",
        "--threads",
        "1",
        "--json",
        "--chat",
        "Who were the Normans descended from? Quote the document.",
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr
    d = json.loads(out.stdout)
    decoder = d["stats"]["decoder"]
    for key in (
        "steps",
        "mean_accepted",
        "acceptance_by_source",
        "time_verify_s",
        "speedup_vs_plain",
        "tree_size_mean",
    ):
        assert key in decoder
    bad = subprocess.run(
        [sys.executable, "-m", "localrag", "generate", "--model", "smollm2-135m-instruct", "--decoder", "rasd",
         "--draft", "gemma3-270m", "hi"],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert bad.returncode == 2 and "vocabulary" in bad.stderr
