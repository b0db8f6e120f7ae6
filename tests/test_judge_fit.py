"""``bench judge``'s fit: the layer and penalty chosen by grouped cross-validation, the threshold set
from out-of-fold scores, the probe file written and found again. Synthetic hidden states (one layer
carries the label along a direction, the others none), so what is checked is the fitting itself.

Run: .venv/bin/python -m pytest tests/test_judge_fit.py -q
"""

from __future__ import annotations

import struct

import numpy as np

import localrag.bench.judge as bench_judge
from localrag.__main__ import build_parser
from localrag.answer import RAG_INSTRUCTIONS
from localrag.bench.judge import MAX_EARLY_FALSE_REFUSALS, Features, fit_probe, measure
from localrag.bench.prompts import VARIANTS
from localrag.judge import file_sha256, find_probe, prompt_key


def _features(n: int, seed: int, informative: int = 18) -> Features:
    direction = np.random.default_rng(99).normal(size=64)  # the same direction in every sample
    rng = np.random.default_rng(seed)
    y = rng.random(n) < 0.5
    states = {}
    for layer in (8, informative, 26):
        x = rng.normal(size=(n, 64))
        if layer == informative:
            x += np.outer(np.where(y, 0.8, -0.8), direction / np.linalg.norm(direction))
        states[layer] = x
    return Features((8, informative, 26), states, y, np.arange(n) // 2, np.ones(n), np.full(n, 800))


def test_the_fit_picks_the_layer_that_carries_the_label_and_keeps_its_early_refusals_within_bound(tmp_path, monkeypatch):
    monkeypatch.setenv("LOCALRAG_PROBES_DIR", str(tmp_path))
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF" + bytes(100))
    probe, fitted = fit_probe(_features(400, 0), model, "Answer briefly.", {"suite": "synthetic"})
    assert probe.layer == 18, fitted["layer_auroc_cv"]
    assert fitted["cv_auroc"] > 0.75 and max(v for k, v in fitted["layer_auroc_cv"].items() if not k.startswith("18@")) < 0.65
    assert fitted["cv_early_refusals_answerable"] <= MAX_EARLY_FALSE_REFUSALS + 0.01
    assert fitted["cv_early_refusals_unanswerable"] > fitted["cv_early_refusals_answerable"]
    probe.save()
    found = find_probe(probe.model_sha256, "Answer briefly.")
    assert found is not None and found.model_bytes == model.stat().st_size
    assert find_probe(probe.model_sha256, "Answer at length.") is None
    assert found.prompt_sha256 == prompt_key("Answer briefly.")

    held_out = measure(found, _features(300, 1))  # fresh rows, the same direction
    assert held_out["auroc"] > 0.75 and held_out["early_refusals_answerable"] < 0.15


def test_bench_judge_reads_and_keys_the_probe_on_the_prompt_it_is_given(tmp_path, monkeypatch, capsys):
    """``bench judge --prompt do-not-say --fit`` reads the judge's prompt with that variant's
    instructions and writes a probe the app finds for them only (its own prompt keeps its probe)."""
    monkeypatch.setenv("LOCALRAG_PROBES_DIR", str(tmp_path))
    model = tmp_path / "model.gguf"
    model.write_bytes((b"GGUF" + struct.pack("<IQQ", 3, 0, 0)).ljust(32, b"\0"))  # a header, no tensors, no keys
    read = []

    def collect(suite, split, n, seed, name, k, instructions, limit=None, progress=None):  # the read, synthetic
        read.append(instructions)
        return _features(200, 1), model

    monkeypatch.setattr(bench_judge, "collect", collect)
    args = build_parser().parse_args(["bench", "judge", "--split", "calibration", "--prompt", "do-not-say", "--fit",
                                      "--json", "--model", str(model)])
    assert args.func(args) == 0
    theirs = VARIANTS["do-not-say"].instructions
    assert read == [theirs] and theirs != RAG_INSTRUCTIONS
    assert find_probe(file_sha256(model), theirs) is not None
    assert find_probe(file_sha256(model), RAG_INSTRUCTIONS) is None
    assert '"prompt": "do-not-say"' in capsys.readouterr().out


def test_bench_judge_without_a_probe_for_the_prompt_says_so_before_reading(tmp_path, monkeypatch, capsys):
    """Measuring a prompt no probe was fitted on is refused at once, naming the prompt, before the
    minutes of reading the questions."""
    monkeypatch.setenv("LOCALRAG_PROBES_DIR", str(tmp_path))
    read = []
    monkeypatch.setattr(bench_judge, "collect", lambda *a, **k: read.append(a))
    args = build_parser().parse_args(["bench", "judge", "--prompt", "quote", "--model", "smollm2-135m-instruct"])
    assert args.func(args) == 2
    assert "no probe for this model and the quote prompt" in capsys.readouterr().err
    assert read == []
