"""Ingest throughput benchmark: MB/s and chunks/s on real text, then an unchanged re-ingest.

    python -m localrag bench ingest [PATH] [--json]
    python -m localrag bench ingest --compare [PATH] [--rounds 4] [--sample N] [--threads N] [--no-recall]

PATH defaults to Debian's python3.11-doc reST sources
(/usr/share/doc/python3.11/html/_sources, about 12 MB; ``apt-get install
python3.11-doc``). A fresh temporary index is used; the embedding model is
loaded before timing starts, so the figures are steady-state throughput.
The re-ingest of the unchanged corpus must take under 5% of the first ingest.
``--compare`` runs the torch and the int8 ONNX embedders on the same corpus instead
(:mod:`localrag.bench.ingest_compare`).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path

from localrag.bench.ingest_compare import print_compare, run_compare
from localrag.rag.config import IndexConfig
from localrag.rag.index import DocumentIndex

DEFAULT_CORPUS = Path("/usr/share/doc/python3.11/html/_sources")


def corpus_bytes(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def run_ingest_bench(path: Path) -> dict:
    with tempfile.TemporaryDirectory(prefix="localrag-bench-ingest-") as tmp:
        index = DocumentIndex(IndexConfig(index_dir=Path(tmp) / "index"))
        t0 = time.perf_counter()
        index.embedder.embed(["warm up the model"])
        _ = index.chunker
        load_s = time.perf_counter() - t0
        first = index.ingest([path])
        again = index.ingest([path])
        index.close()
    mb = first.bytes / 1e6
    return {
        "corpus": str(path),
        "corpus_mb": round(corpus_bytes(path) / 1e6, 2),
        "files": first.seen,
        "files_indexed": first.added,
        "failed": len(first.failed),
        "indexed_mb": round(mb, 2),
        "chunks": first.chunks,
        "model_load_seconds": round(load_s, 2),
        "first_seconds": round(first.seconds, 2),
        "mb_per_s": round(mb / first.seconds, 5),
        "chunks_per_s": round(first.chunks / first.seconds, 1),
        "reingest_seconds": round(again.seconds, 3),
        "reingest_skipped": again.skipped,
        "reingest_ratio": round(again.seconds / first.seconds, 6),
        "reingest_under_5pct": again.seconds < 0.05 * first.seconds,
        "cpu_count": os.cpu_count(),
    }


def add_bench_cli(bench_subparsers) -> None:
    p = bench_subparsers.add_parser("ingest", help="ingest throughput (MB/s, chunks/s) and re-ingest ratio")
    p.add_argument(
        "path", nargs="?", default=str(DEFAULT_CORPUS), help="folder or file (default: Python docs)"
    )
    p.add_argument("--json", action="store_true")
    p.add_argument("--compare", action="store_true", help="torch vs int8 ONNX embedder, interleaved, one process")
    p.add_argument("--rounds", type=int, default=4, help="--compare: interleaved file groups (default 4)")
    p.add_argument("--sample", type=int, default=None, help="--compare: only N files spread over the corpus")
    p.add_argument("--threads", type=int, default=None, help="--compare: threads for both embedders")
    p.add_argument("--no-recall", action="store_true", help="--compare: skip the SQuAD recall@5 runs")
    p.set_defaults(func=cmd_ingest_bench)


def cmd_ingest_bench(args) -> int:
    path = Path(args.path)
    if not path.exists():
        print(f"corpus not found: {path} (for the default: apt-get install python3.11-doc)")
        return 2
    if args.compare:
        result = run_compare(path, args.rounds, args.sample, args.threads, recall=not args.no_recall)
        if args.json:
            print(json.dumps(result, indent=2))
        else:
            print_compare(result)
        return 0
    result = run_ingest_bench(path)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(
        f"corpus {result['corpus']}: {result['files']} files, {result['indexed_mb']} MB indexed, "
        f"{result['chunks']} chunks, {result['failed']} failed"
    )
    print(
        f"first ingest: {result['first_seconds']} s = {result['mb_per_s']} MB/s, {result['chunks_per_s']} chunks/s "
        f"(model load {result['model_load_seconds']} s, {result['cpu_count']} CPUs)"
    )
    print(
        f"re-ingest unchanged: {result['reingest_seconds']} s = {100 * result['reingest_ratio']:.2f}% of first "
        f"({'under' if result['reingest_under_5pct'] else 'NOT under'} 5%)"
    )
    return 0
