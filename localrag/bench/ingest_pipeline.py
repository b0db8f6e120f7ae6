"""Does the ingest pipeline pay? Parsing on a worker thread against one thread doing both in turn.

    python -m localrag bench ingest-pipeline [PATH] [--files N] [--repeats R] [--json]

Both methods ingest the same files into a fresh index in this process, with a fresh
embedder each run (its text cache would otherwise favour the second method), model
loaded before the clock starts. Rounds alternate which method goes first; a round's
ratio compares its two adjacent runs, and the medians over rounds are reported.
PATH defaults to the first N files of Debian's python3.11-doc reST sources.
"""

from __future__ import annotations

import statistics
import tempfile
from pathlib import Path

from localrag.bench.common import alternate, output, timed
from localrag.bench.data import PYTHON_DOCS
from localrag.rag.config import IndexConfig
from localrag.rag.embed import make_embedder
from localrag.rag.index import DocumentIndex

METHODS = {"worker": True, "one-thread": False}


def _files(path: Path, n: int) -> list[Path]:
    if path.is_file():
        return [path]
    return sorted(f for f in path.rglob("*") if f.is_file())[:n]


def _run(files: list[Path], parse_worker: bool) -> tuple[float, int]:
    with tempfile.TemporaryDirectory(prefix="localrag-bench-pipeline-") as tmp:
        cfg = IndexConfig(index_dir=Path(tmp) / "index", parse_worker=parse_worker)
        embedder = make_embedder(cfg.model_path, cfg.embedding_backend, cfg.embed_batch, cfg.embed_threads, cfg.device)
        index = DocumentIndex(cfg, embedder=embedder)
        embedder.embed(["warm up the model"])
        _ = index.chunker
        report, seconds = timed(index.ingest, files)
        index.close()
    return seconds, report.chunks


def run_pipeline_bench(path: Path, n_files: int, repeats: int) -> dict:
    files = _files(path, n_files)
    rounds = []
    for r in range(repeats):
        row = {}
        for name in alternate(METHODS, r):
            seconds, chunks = _run(files, METHODS[name])
            row[name] = {"seconds": round(seconds, 2), "chunks": chunks, "chunks_per_s": round(chunks / seconds, 2)}
        row["speedup"] = round(row["one-thread"]["seconds"] / row["worker"]["seconds"], 3)
        rounds.append(row)
    return {
        "corpus": str(path),
        "files": len(files),
        "mb": round(sum(f.stat().st_size for f in files) / 1e6, 3),
        "rounds": rounds,
        "median_seconds": {m: statistics.median(r[m]["seconds"] for r in rounds) for m in METHODS},
        "median_speedup": statistics.median(r["speedup"] for r in rounds),
    }


def add_bench_cli(bench_subparsers) -> None:
    p = bench_subparsers.add_parser(
        "ingest-pipeline", help="ingest with the parse worker thread vs one thread (median speedup)"
    )
    p.add_argument("path", nargs="?", default=str(PYTHON_DOCS), help="folder or file (default: Python docs)")
    p.add_argument("--files", type=int, default=40, help="first N files of the folder (sorted)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_pipeline_bench)


def cmd_pipeline_bench(args) -> int:
    path = Path(args.path)
    if not path.exists():
        print(f"corpus not found: {path} (for the default: apt-get install python3.11-doc)")
        return 2
    return output(run_pipeline_bench(path, args.files, args.repeats), args.json, print_pipeline)


def print_pipeline(result: dict) -> None:
    print(f"corpus {result['corpus']}: {result['files']} files, {result['mb']} MB")
    for i, row in enumerate(result["rounds"], start=1):
        cells = ", ".join(f"{m} {row[m]['seconds']} s ({row[m]['chunks_per_s']} chunks/s)" for m in METHODS)
        print(f"round {i}: {cells}; speedup {row['speedup']}x")
    med = result["median_seconds"]
    print(f"median: worker {med['worker']} s, one-thread {med['one-thread']} s; median speedup {result['median_speedup']}x")
