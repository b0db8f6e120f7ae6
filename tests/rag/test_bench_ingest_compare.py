"""``bench ingest --compare`` on a small real corpus: both embedders, the same chunks, every figure.

Speed itself is measured by the benchmark command, never asserted here; this checks that the
command measures what it says (same corpus for both, counts, RSS samples, read-back cosine).

Run: .venv/bin/python -m pytest tests/rag/test_bench_ingest_compare.py -q
"""

from __future__ import annotations

import pytest
from rag_docgen import prose, write

from localrag.bench.ingest import print_compare, run_compare


@pytest.mark.slow
def test_compare_runs_both_embedders_on_the_same_chunks(tmp_path, capsys):
    docs = tmp_path / "docs"
    for i in range(4):
        write(docs / f"part{i}.txt", prose(900, seed=i))
    result = run_compare(docs, rounds=2, recall=False)
    assert (result["files"], result["rounds"], result["same_chunks"]) == (4, 2, True)
    old, new = result["torch"], result["onnx"]
    assert old["chunks"] == new["chunks"] >= 8 and old["files"] == new["files"] == 4
    assert old["embedded"] == new["embedded"] > 0 and old["failed"] == new["failed"] == 0
    assert len(old["round_pipeline_seconds"]) == len(new["round_embed_chunks_per_s"]) == 2
    assert old["fingerprint"] != new["fingerprint"]
    assert old["peak_rss_mb"] > 0 and new["peak_rss_mb"] > 0
    assert result["embed_speedup"] > 0 and result["pipeline_speedup"] > 0
    cosine = result["cosine_onnx_to_torch"]
    assert cosine["chunks"] == new["embedded"] and 0.98 <= cosine["min"] <= cosine["median"] < 1.0
    print_compare(result)
    out = capsys.readouterr().out
    assert "embed chunks/s" in out and "whole pipeline" in out and "onnx / torch" in out
