"""bench grounding: its metrics and bookkeeping on hand-made data, then one real run (bundled model,
real index) on a small JSONL file.

Run: HF_HUB_OFFLINE=1 .venv/bin/python -m pytest tests/grounded/test_bench_grounding.py -q
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass, replace

import pytest

from localrag.bench.data import (
    GoldEvidence,
    GroundingRecord,
    QARecord,
    jsonl_grounding,
    load_records,
    split_of,
)
from localrag.bench.grounding import (
    FEATURES,
    GroundingRow,
    auroc,
    cited_on_gold,
    fit_refusal_threshold,
    fit_weights,
    questions,
    summarize,
    versus,
)
from localrag.evidence import EvidenceAligner, EvidenceConfig
from localrag.judge import PROBES_DIR, Probe


def test_auroc_counts_ties_half_and_needs_both_classes():
    assert auroc([0.9, 0.8, 0.1], [True, True, False]) == 1.0
    assert auroc([0.1, 0.9], [True, False]) == 0.0
    assert auroc([0.5, 0.5, 0.2], [True, False, False]) == 0.75
    assert auroc([0.5, 0.7], [True, True]) is None


@dataclass(frozen=True)
class Hit:
    chunk_id: str
    text: str
    file: str
    page: int | None = None
    line_start: int | None = 1
    line_end: int | None = 1


def test_citations_are_checked_against_the_gold_sentence():
    docs = ["Ed Wood. Ed Wood was an American filmmaker.  He directed   Plan 9 in 1957.",
            "Scott Derrickson. Scott Derrickson is an American director born in 1966."]
    rec = GroundingRecord(QARecord("q", tuple(docs), ("1957",)), (GoldEvidence(0, "He directed Plan 9 in 1957."),))
    # chunks hold the collapsed text, as the text parser writes it
    hits = [Hit("a", "Ed Wood was an American filmmaker. He directed Plan 9 in 1957.", "/x/doc00000.txt"),
            Hit("b", "Scott Derrickson is an American director born in 1966.", "/x/doc00001.txt")]
    aligner = EvidenceAligner()
    on_gold = aligner.align("He directed Plan 9 in 1957.", hits)
    assert cited_on_gold(on_gold, hits, rec, docs) == (1, 1)
    off_gold = aligner.align("Ed Wood was an American filmmaker.", hits)
    assert cited_on_gold(off_gold, hits, rec, docs) == (1, 0)
    other_doc = aligner.align("Scott Derrickson is an American director.", hits)
    assert cited_on_gold(other_doc, hits, rec, docs) == (1, 0)
    unsupported = aligner.align("It was filmed on Mars in 1999.", hits)
    assert cited_on_gold(unsupported, hits, rec, docs) == (0, 0)


def _row(score, answerable=True, f1=0.0, model_refused=False, refused=False, cited=(0, 0), cached=False,
         stop_reason="eog", repeats=False) -> GroundingRow:
    return GroundingRow("q", ["a"] if answerable else [], "ans", "ans", answerable, f1, f1 > 0, model_refused,
                        score, score, refused, {}, cited[0], cited[1], 0.01, 1.0, cached, stop_reason, repeats)


def test_summary_metrics():
    rows = [_row(0.9, f1=1.0, cited=(2, 2)), _row(0.8, f1=0.6, cited=(1, 0)), _row(0.3, f1=0.0),
            _row(0.2, f1=0.0, refused=True), _row(0.1, answerable=False, refused=True),
            _row(0.7, answerable=False, stop_reason="repetition"),
            _row(0.0, answerable=False, model_refused=True, refused=True, repeats=True)]
    out = summarize(rows)
    assert out["auroc"] == 1.0  # the two correct answers outscore the two wrong ones
    assert out["citation_precision"] == round(2 / 3, 3)
    assert out["refusal_accuracy"] == round(2 / 3, 3) and out["false_refusal_rate"] == 0.25
    assert out["overhead"] == 0.01
    assert out["details"]["correct"] == 2 and out["details"]["model_refused"] == 1
    assert out["details"]["repetition_guard_fired"] == 1 and out["details"]["answers_repeating_a_sentence"] == 1
    assert summarize([_row(0.5, cached=True)])["overhead"] is None  # no fresh answer timed


def test_the_judge_is_scored_on_the_questions_it_judged():
    """p(answerable) against answerable-or-not over the judged questions only, and the share of each
    kind it refused before a word; no question judged (no probe for the prompt): no entry."""
    def row(answerable: bool, p: float | None, judged: bool = False) -> GroundingRow:
        return replace(_row(0.5, answerable=answerable), judge_p=p, judged=judged, answer_s=0.2 if judged else 1.0)

    rows = [row(True, 0.9), row(True, 0.6), row(True, 0.1, judged=True), row(False, 0.3),
            row(False, 0.05, judged=True), row(False, None)]
    judge = summarize(rows)["judge"]
    assert judge["auroc_answerable"] == round(5 / 6, 3)  # 0.1 (answerable) loses to 0.3 (not); the rest win
    assert judge["judged"] == 5 and judge["positives"] == 3 and judge["negatives"] == 2
    assert judge["refused_early_unanswerable"] == 0.5 and judge["refused_early_answerable"] == round(1 / 3, 3)
    assert judge["answer_s_median_refused_early"] == 0.2 and judge["answer_s_median_written"] == 1.0
    assert summarize([row(True, None), row(False, None)])["judge"] is None


def test_refusal_threshold_keeps_false_refusals_within_bound():
    answerable = [_row(s / 20) for s in range(20)]  # scores 0.00 .. 0.95
    t = fit_refusal_threshold(answerable + [_row(0.99, answerable=False)])
    assert sum(r.score < t for r in answerable) == 3  # 15% of 20
    t2 = fit_refusal_threshold([_row(0.5, model_refused=True)] * 3 + answerable)
    assert sum(r.score < t2 for r in answerable) == 0  # the model's own refusals use up the allowance


def test_past_the_allowance_the_check_warns_on_at_most_one_written_right_answer_in_twenty():
    """The model's own refusals alone pass the allowance (as the app's prompt makes the 1.5B decline
    one answerable SQuAD question in six): the threshold is not 0, which would warn on nothing, but
    the highest that warns on at most 5% of the answers written to answerable questions. Youden's J
    (the rule before) takes 0.5 here, which warns on 8 of the 20."""
    answerable = [_row(0.5, model_refused=True)] * 4 + [_row(s / 40) for s in range(12, 32)]  # 0.3 .. 0.775
    unanswerable = [_row(s, answerable=False) for s in (0.1, 0.2, 0.31, 0.45, 0.49)]
    t = fit_refusal_threshold(answerable + unanswerable)
    assert t == 0.325  # 0.3 alone is warned on (1 of the 20 written); 3 of the 5 unanswerable refused
    assert sum(r.score < t for r in answerable if not r.model_refused) == 1


def test_the_fit_weighs_the_models_confidence_and_fills_it_in_where_unknown():
    """Right answers written surely, wrong ones guessed: the confidence gets a positive weight, the
    fitted default is the median known confidence, and an answer without one is fitted at it."""
    def row(correct: bool, confidence: float | None) -> GroundingRow:
        features = {**dict.fromkeys(FEATURES, 0.5), "confidence": confidence}
        return GroundingRow("q", ["a"], "ans", "ans", True, 1.0 if correct else 0.0, correct, False, 0.5, 0.5,
                            False, features, 0, 0, 0.01, 1.0, False, "eog", False)

    rows = [row(True, -0.05 * i) for i in range(1, 9)] + [row(False, -1.0 - 0.1 * i) for i in range(8)]
    fitted = fit_weights(rows + [row(True, None)], EvidenceConfig(), label="correct")
    assert fitted.weight_confidence > 0
    assert fitted.confidence_default == pytest.approx((-1.0 - 0.4) / 2)  # the median of the 16 known


def test_the_fit_weighs_the_judge_and_centres_it_where_no_judge_read():
    """Right answers to questions the judge thought answerable, wrong ones to questions it doubted:
    its logit gets a positive weight, centred on the median judged logit, which also stands in for an
    answer no judge read."""
    def row(correct: bool, judged_logit: float | None) -> GroundingRow:
        features = {**dict.fromkeys(FEATURES, 0.5), "confidence": -0.3, "answerable": judged_logit}
        return GroundingRow("q", ["a"], "ans", "ans", True, 1.0 if correct else 0.0, correct, False, 0.5, 0.5,
                            False, features, 0, 0, 0.01, 1.0, False, "eog", False)

    rows = [row(True, 1.0 + 0.2 * i) for i in range(8)] + [row(False, -2.0 + 0.2 * i) for i in range(8)]
    fitted = fit_weights(rows + [row(True, None)], EvidenceConfig(), label="correct")
    assert fitted.weight_answerable > 0
    assert fitted.answerable_center == pytest.approx((-0.6 + 1.0) / 2)  # the median of the 16 judged
    aligner = EvidenceAligner(config=fitted)
    assert aligner.align("Marta Ilves", [], answerable=0.9).answerable == 0.9


def test_calibration_questions_leave_out_the_judges_own():
    """The shipped probe was fitted on a seeded sample of SQuAD's calibration half: a calibration
    run never asks those questions (the judge would be combined on its training data), and a
    report-half run is the plain seeded sample (its cached answers stay valid)."""
    probe = Probe.load(next(PROBES_DIR.glob("*.json")))
    f = probe.fitted
    seen = {r.qa.question for r in load_records(f["suite"], None, f["split"], f["n_sampled"], f["seed"])}
    cal = questions("squad", None, "calibration", 200, 0, probe)
    assert len(cal) == 200 and not seen & {r.qa.question for r in cal}
    assert seen & {r.qa.question for r in load_records("squad", None, "calibration", 200, 0)}  # it would have
    report = [r.qa.question for r in questions("squad", None, "report", 200, 0, probe)]
    assert report == [r.qa.question for r in load_records("squad", None, "report", 200, 0)]


def test_jsonl_records_and_a_split_kept_apart(tmp_path):
    lines = [{"question": f"q{i}", "docs": [f"doc {i} a", f"doc {i} b"], "answers": [f"a{i}"] if i % 3 else [],
              "gold_doc": 1} for i in range(40)]
    path = tmp_path / "qa.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in lines), encoding="utf-8")
    recs = jsonl_grounding(str(path))
    assert recs[1].gold == (GoldEvidence(1, "doc 1 b"),) and recs[0].gold == ()  # unanswerable: no gold
    calib = load_records(None, str(path), "calibration", None, 0)
    report = load_records(None, str(path), "report", None, 0)
    assert {r.qa.question for r in calib}.isdisjoint({r.qa.question for r in report})
    assert len(calib) + len(report) == 40 and min(len(calib), len(report)) >= 10
    assert all(split_of(r) == "report" for r in report)
    five = [r.qa.question for r in load_records(None, str(path), "report", 5, 0)]
    in_report = [r.qa.question for r in report]
    assert len(five) == 5 and five == [q for q in in_report if q in five]  # 5 of the split, in its order
    assert five == [r.qa.question for r in load_records(None, str(path), "report", 5, 0)]  # seeded


def test_another_prefill_is_set_against_exact_question_by_question():
    """versus pairs the two arms' answers by question: the identical share, the mean F1 change over
    answerable questions with its paired interval, the support AUROC's and the refusals' change."""
    exact = [_row(0.9, f1=1.0), _row(0.8, f1=1.0), _row(0.2, f1=0.0), _row(0.1, answerable=False, refused=True)]
    reuse = [exact[0], replace(exact[1], answer="other", f1=0.0, score=0.95), exact[2],
             replace(exact[3], answer="other", refused=False)]
    v = versus(exact, reuse, summarize(exact), summarize(reuse))
    assert v["same_answers"] == 0.5
    assert v["f1_delta"] == round(100 * -1 / 3, 2)  # one of three answerable lost its point, the other two held
    assert v["f1_delta_ci95"][0] == -100.0 and v["f1_delta_ci95"][1] == 0.0
    assert v["auroc_delta"] == 0.5 - 1.0  # the changed answer is wrong and outscores the right one
    assert v["refusal_accuracy_delta"] == -1.0 and v["false_refusal_rate_delta"] == 0.0
    same = versus(exact, exact, summarize(exact), summarize(exact))
    assert same["same_answers"] == 1.0 and same["f1_delta"] == 0.0


def test_a_calibration_takes_one_prefill():
    """--calibrate fits the constants on one set of answers: with both prefills it says so and stops
    before a model is loaded."""
    bad = subprocess.run([sys.executable, "-m", "localrag", "bench", "grounding", "--split", "calibration",
                          "--prefill", "exact,reuse", "--calibrate"], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "calibrate on one prefill at a time" in bad.stderr
    assert "Traceback" not in bad.stderr


@pytest.mark.slow
def test_bench_grounding_reads_each_question_both_ways_with_the_chunk_cache(tmp_path):
    """--prefill exact,reuse on the small model: every question answered twice, the reuse answers'
    chunks placed from the bench's own chunk cache (none in the exact ones), the app's cache untouched."""
    topics = [("Zephyr telescope", "Marta Ilves polished its mirror in 1998"),
              ("harbor tide tables", "the harbor master posts them at the gate every Monday")]
    lines = [{"question": f"What does the report say about the {name}?", "answers": [fact],
              "docs": [f"The {name} report. " + " ".join([f"In the survey of the {name}, {fact}."] * 4)]}
             for name, fact in topics]
    path = tmp_path / "two.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in lines), encoding="utf-8")
    cache = tmp_path / "cache"
    out = subprocess.run([sys.executable, "-m", "localrag", "bench", "grounding", "--data", str(path), "--split", "all",
                          "--n", "2", "--model", "smollm2-135m-instruct", "--prefill", "exact,reuse", "--json",
                          "--out", str(tmp_path / "full.json")],
                         capture_output=True, text=True, timeout=900,
                         env={**__import__("os").environ, "LOCALRAG_CACHE_DIR": str(cache)})
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout)
    assert result["prefill"] == "exact" and result["reuse"]["details"]["questions"] == 2
    v = result["reuse"]["vs_exact"]
    assert 0 <= v["same_answers"] <= 1 and v["placed_tokens_mean"] > 0
    assert result["chunk_cache"]["misses"] >= 2  # each question's own document, computed the first time
    rows = json.loads((tmp_path / "full.json").read_text())["rows"]
    assert [r["prefill"] for r in rows] == ["exact", "exact", "reuse", "reuse"]
    assert [r["question"] for r in rows[:2]] == [r["question"] for r in rows[2:]]
    assert all(r["placed_tokens"] == 0 for r in rows[:2]) and all(r["placed_tokens"] > 0 for r in rows[2:])
    assert list((cache / "grounding" / "chunk-kv").iterdir()) and not (cache / "chunk-kv").exists()
    # a longer head reads more of each chunk at its place: fewer tokens placed, 8 fewer a chunk
    longer = subprocess.run([sys.executable, "-m", "localrag", "bench", "grounding", "--data", str(path), "--split",
                             "all", "--n", "2", "--model", "smollm2-135m-instruct", "--prefill", "reuse", "--head", "24",
                             "--json", "--out", str(tmp_path / "head24.json")], capture_output=True, text=True,
                            timeout=900, env={**__import__("os").environ, "LOCALRAG_CACHE_DIR": str(cache)})
    assert longer.returncode == 0, longer.stderr[-2000:]
    assert json.loads(longer.stdout)["chunk_cache"]["head"] == 24
    rows24 = json.loads((tmp_path / "head24.json").read_text())["rows"]
    fewer = [a["placed_tokens"] - b["placed_tokens"] for a, b in zip(rows[2:], rows24, strict=True)]
    assert all(d > 0 and d % 8 == 0 for d in fewer), fewer


@pytest.mark.slow
def test_bench_grounding_runs_end_to_end(tmp_path):
    docs = ["The Zephyr telescope stands on Mount Kora. Its mirror was polished by Marta Ilves in 1998.",
            "Either party may terminate this agreement with 30 days written notice.",
            "The blue ferry Aurora leaves for the island at seven in the morning."]
    lines = [{"question": "Who polished the mirror of the Zephyr telescope?", "docs": docs[:1],
              "answers": ["Marta Ilves"], "gold_doc": 0},
             {"question": "How many days of notice end the agreement?", "docs": docs[1:2], "answers": ["30 days"],
              "gold_doc": 0},
             {"question": "When does the ferry return from the island?", "docs": docs[2:], "answers": []}]
    path = tmp_path / "tiny.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in lines), encoding="utf-8")
    out = subprocess.run([sys.executable, "-m", "localrag", "bench", "grounding", "--data", str(path), "--split", "all",
                          "--n", "3", "--instructions", "app", "--json", "--out", str(tmp_path / "full.json")],
                         capture_output=True, text=True, timeout=900,
                         env={**__import__("os").environ, "LOCALRAG_CACHE_DIR": str(tmp_path / "cache")})
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout)
    for key in ("auroc", "citation_precision", "refusal_accuracy", "false_refusal_rate", "overhead"):
        assert key in result
    assert result["details"]["questions"] == 3 and result["details"]["unanswerable"] == 1
    assert result["refusal_accuracy"] in (0.0, 1.0) and 0 <= result["false_refusal_rate"] <= 1
    assert 0 < result["overhead"] < 1
    # the app's instructions: the default model's probe judges every question (a first question each)
    assert result["instructions"] == "app" and result["judge"]["judged"] == 3
    rows = json.loads((tmp_path / "full.json").read_text())["rows"]
    assert [r["question"] for r in rows] == [x["question"] for x in lines] and all(r["answer_s"] > 0 for r in rows)
    assert all(0 <= r["judge_p"] <= 1 for r in rows)
    # the model's own confidence, from its generation (an answer the judge refused was not generated)
    assert all(r["features"]["confidence"] is not None for r in rows if not r["judged"])
    bad = subprocess.run([sys.executable, "-m", "localrag", "bench", "grounding", "--data", str(path), "--calibrate"],
                         capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "calibrate on --split calibration" in bad.stderr


@pytest.mark.slow
def test_bench_prompts_answers_every_variant_on_the_same_questions(tmp_path):
    """bench prompts end to end on the small model: two variants, interleaved, on the same two
    calibration questions, each scored, with the whole table's keys."""
    out = subprocess.run([sys.executable, "-m", "localrag", "bench", "prompts", "--suite", "squad", "--n", "2",
                          "--variants", "short,short-k3", "--max-tokens", "16", "--model", "smollm2-135m-instruct",
                          "--json", "--out", str(tmp_path / "full.json")],
                         capture_output=True, text=True, timeout=900,
                         env={**__import__("os").environ, "LOCALRAG_CACHE_DIR": str(tmp_path / "cache")})
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout)
    assert result["split"] == "calibration" and set(result["variants"]) == {"short", "short-k3"}
    assert result["variants"]["short"]["k"] == 5 and result["variants"]["short-k3"]["k"] == 3
    for v in result["variants"].values():
        assert v["questions"] == 2 and v["latency_median_s"] > 0 and v["answer_tokens_mean"] is not None
    rows = json.loads((tmp_path / "full.json").read_text())["rows"]
    assert [r["variant"] for r in rows] == ["short", "short-k3"] * 2  # interleaved per question
    assert rows[0]["question"] == rows[1]["question"] != rows[2]["question"]
