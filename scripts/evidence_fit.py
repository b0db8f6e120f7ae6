"""The evidence check's constants fitted on the app's answers, with the threshold rule of
``bench grounding --calibrate`` (issue 52; calibration half only).

Answers come from ``bench grounding --instructions app --cache`` runs (generated here if not cached):

    HF_HUB_OFFLINE=1 PYTHONPATH=. .venv/bin/python scripts/evidence_fit.py --suites squad:200 --cv
    HF_HUB_OFFLINE=1 PYTHONPATH=. .venv/bin/python scripts/evidence_fit.py --suites squad:200,hotpotqa:100

``--cv``: grouped 5-fold cross-validation (``bench judge``'s folds: questions on one paragraph in one fold) of the fit and of
each threshold rule, on the first suite: what each would warn on out of fold. Without it: one fit on
every suite's answers together, and what it refuses in each (in sample).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, replace

import numpy as np

from localrag.bench import grounding as g
from localrag.bench.common import AnswerCache
from localrag.bench.judge import document_group, grouped_folds
from localrag.config import GenerationConfig
from localrag.evidence import EvidenceAligner, EvidenceConfig

GEN = GenerationConfig(max_tokens=32)  # bench grounding's


def answered(suite: str, n: int) -> tuple[g.Setup, list]:
    s = g.setup(suite, None, "calibration", n, 0, "plain", None, "target", EvidenceConfig(),
                instructions=g.INSTRUCTIONS["app"])
    return s, [g.run_question(s, rec, "plain", 5, GEN, AnswerCache())[1] for rec in s.records]


def rescore(s: g.Setup, answers: list, config: EvidenceConfig, idx) -> list[g.GroundingRow]:
    s.aligner = EvidenceAligner(s.aligner.embedder, config=config)
    return [g.score_row(s, s.records[i], answers[i], True) for i in idx]


def fit(parts: list[tuple[g.Setup, list, list[int]]], threshold) -> EvidenceConfig:
    """``bench grounding --calibrate``'s fit: the weights on rows scored with the defaults, the
    threshold on rows rescored with them."""
    fitted = g.fit_weights([r for s, a, idx in parts for r in rescore(s, a, EvidenceConfig(), idx)], EvidenceConfig())
    t = threshold([r for s, a, idx in parts for r in rescore(s, a, fitted, idx)])
    return replace(fitted, refusal_threshold=t, sentence_threshold=t)


def youden(rows: list[g.GroundingRow]) -> float:
    """The rule before: the threshold refusing the most more unanswerable than answerable questions."""
    ans, una = [r for r in rows if r.answerable], [r for r in rows if not r.answerable]

    def refused(group, t):
        return np.mean([r.model_refused or r.score < t for r in group])

    return max(sorted({r.score for r in rows}), key=lambda t: (refused(una, t) - refused(ans, t), -t))


def counts(rows: list[g.GroundingRow]) -> dict:
    written = [r for r in rows if not r.model_refused]
    right = [r for r in written if r.answerable and r.contained]
    return {"answerable_refused": [sum(r.refused for r in rows if r.answerable), sum(r.answerable for r in rows)],
            "unanswerable_refused": [sum(r.refused for r in rows if not r.answerable),
                                     sum(not r.answerable for r in rows)],
            "written_answerable_warned": [sum(r.refused for r in written if r.answerable),
                                          sum(r.answerable for r in written)],
            "right_warned": [sum(r.refused for r in right), len(right)],
            "wrong_shown_supported": [sum(not r.refused for r in written if r not in right), len(written) - len(right)]}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--suites", default="squad:200", help="suite:n,... (calibration half)")
    p.add_argument("--cv", action="store_true")
    args = p.parse_args()
    suites = [(x.split(":")[0], int(x.split(":")[1])) for x in args.suites.split(",")]
    sets = [answered(suite, n) for suite, n in suites]
    if args.cv:
        s, answers = sets[0]
        rules = {"youden": youden, "check allowance": g.fit_refusal_threshold}
        held: dict[str, list] = {name: [] for name in (*rules, "shipped")}
        for train, test in grouped_folds([document_group(r) for r in s.records]):
            for name, rule in rules.items():
                held[name] += rescore(s, answers, fit([(s, answers, train)], rule), test)
            held["shipped"] += rescore(s, answers, EvidenceConfig(), test)
        print(json.dumps({name: counts(rows) for name, rows in held.items()}))
        return
    fitted = fit([(s, a, range(len(a))) for s, a in sets], g.fit_refusal_threshold)
    print(json.dumps({"config": {k: round(v, 4) if isinstance(v, float) else v for k, v in asdict(fitted).items()},
                      **{suite: counts(rescore(s, a, fitted, range(len(a)))) for (suite, _), (s, a) in
                         zip(suites, sets, strict=True)}}))


if __name__ == "__main__":
    main()
