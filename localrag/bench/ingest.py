"""Ingest throughput benchmark: MB/s and chunks/s on real text, then an unchanged re-ingest; with
``--compare``, the torch embedder against the int8 ONNX one, in one process.

    python -m localrag bench ingest [PATH] [--json]
    python -m localrag bench ingest --compare [PATH] [--rounds 4] [--sample N] [--threads N] [--no-recall] [--json]

PATH defaults to Debian's python3.11-doc reST sources
(/usr/share/doc/python3.11/html/_sources, about 12 MB; ``apt-get install
python3.11-doc``). A fresh temporary index is used; the embedding model is
loaded before timing starts, so the figures are steady-state throughput.
The re-ingest of the unchanged corpus must take under 5% of the first ingest.

``--compare``: both embedders are loaded first (the load is timed apart). The corpus's files are
split into ``--rounds`` groups (every ``rounds``-th file, so each group is a fair
slice); each group is ingested by both backends into two fresh indexes, one after
the other, the first alternating from group to group, so load changes on a shared
machine hit both alike. For each backend it reports:

* embed chunks/s: texts the model encoded / seconds inside the model (cache hits excluded);
* whole pipeline: seconds of ``DocumentIndex.ingest`` (parse + chunk + embed + Chroma
  write + manifest + BM25 rebuild) and indexed chunks/s. Every group's ingest rebuilds
  BM25 over the index so far, the same work for both backends, so more rounds pull the
  pipeline ratio towards 1 (conservative);
* per-round ratios and their median, so the spread shows;
* peak RSS: sampled every 20 ms, attributed to the backend that was ingesting (both
  models stay loaded throughout, so each peak includes the other model too); the RSS
  growth when each model loaded; the process's overall peak;
* cosine of the ONNX vectors to the torch ones, read back from both indexes for every
  chunk text both stored (min, 1st percentile, median);
* recall@5 on SQuAD v2 dev (``bench search``, dense and hybrid) with each embedder,
  unless ``--no-recall``.

``--sample N`` keeps N files spread evenly over the corpus (a subset for a quick run).
``--threads N`` gives both embedders N threads (torch's and ONNX Runtime's intra-op);
without it both follow OMP_NUM_THREADS, else their libraries' defaults.
"""

from __future__ import annotations

import os
import resource
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import psutil

from localrag.bench.common import alternate, median_ratio, output, table
from localrag.bench.data import PYTHON_DOCS
from localrag.bench.search import run_squad
from localrag.rag.config import IndexConfig
from localrag.rag.embed import CachedEmbedding, OnnxEmbedding, TorchEmbedding, make_embedder
from localrag.rag.index import READ_PAGE, DocumentIndex

COMPARED = ("torch", "onnx")  # old, new; the first of each round alternates
RSS_SAMPLE_S = 0.02


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


@dataclass
class BackendRun:
    """What one backend did over every round."""

    backend: str
    fingerprint: str = ""
    threads: str = ""
    load_seconds: float = 0.0
    load_rss_mb: float = 0.0
    files: int = 0
    chunks: int = 0
    failed: int = 0
    pipeline_seconds: float = 0.0
    embedded: int = 0
    embed_seconds: float = 0.0
    peak_rss_mb: float = 0.0
    round_pipeline_seconds: list[float] = field(default_factory=list)
    round_embed_rate: list[float] = field(default_factory=list)
    recall: dict = field(default_factory=dict)

    @property
    def embed_chunks_per_s(self) -> float:
        return self.embedded / self.embed_seconds if self.embed_seconds else 0.0

    @property
    def pipeline_chunks_per_s(self) -> float:
        return self.chunks / self.pipeline_seconds if self.pipeline_seconds else 0.0

    def to_dict(self) -> dict:
        return {
            "backend": self.backend,
            "fingerprint": self.fingerprint,
            "threads": self.threads,
            "load_seconds": round(self.load_seconds, 2),
            "load_rss_mb": round(self.load_rss_mb, 1),
            "files": self.files,
            "chunks": self.chunks,
            "failed": self.failed,
            "pipeline_seconds": round(self.pipeline_seconds, 2),
            "pipeline_chunks_per_s": round(self.pipeline_chunks_per_s, 2),
            "embedded": self.embedded,
            "embed_seconds": round(self.embed_seconds, 2),
            "embed_chunks_per_s": round(self.embed_chunks_per_s, 2),
            "peak_rss_mb": round(self.peak_rss_mb, 1),
            "round_pipeline_seconds": [round(s, 2) for s in self.round_pipeline_seconds],
            "round_embed_chunks_per_s": [round(r, 2) for r in self.round_embed_rate],
            "recall": self.recall,
        }


class RssSampler:
    """Samples this process's RSS in a thread and keeps the peak per label (the phase running)."""

    def __init__(self) -> None:
        self.label: str | None = None
        self.peaks: dict[str, float] = {}
        self._proc = psutil.Process()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(RSS_SAMPLE_S):
            label = self.label
            if label is not None:
                rss = self._proc.memory_info().rss / 2**20
                self.peaks[label] = max(self.peaks.get(label, 0.0), rss)


def rss_mb() -> float:
    return psutil.Process().memory_info().rss / 2**20


def corpus_files(path: Path, sample: int | None) -> list[Path]:
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    if sample and sample < len(files):
        step = len(files) / sample
        files = [files[int(i * step)] for i in range(sample)]
    return files


def thread_setting(embedder: CachedEmbedding) -> str:
    if isinstance(embedder, TorchEmbedding):
        import torch  # lazy: seconds to import (docs/design.md, "Imports"); loaded by then with the torch embedder

        return f"torch, {torch.get_num_threads()} threads"
    assert isinstance(embedder, OnnxEmbedding)
    n = embedder.session.get_session_options().intra_op_num_threads
    return f"onnxruntime, {n} intra-op threads" if n else "onnxruntime, default (1 per core)"


def load(backend: str, threads: int | None) -> tuple[CachedEmbedding, BackendRun]:
    model = IndexConfig().model_path
    run = BackendRun(backend)
    before, started = rss_mb(), time.perf_counter()
    embedder = make_embedder(model, backend, threads=threads)
    embedder.embed(["warm up the model"])
    run.load_seconds = time.perf_counter() - started
    run.load_rss_mb = rss_mb() - before
    run.fingerprint, run.threads = embedder.fingerprint, thread_setting(embedder)
    return embedder, run


def run_compare(path: Path, rounds: int = 4, sample: int | None = None, threads: int | None = None,
                recall: bool = True) -> dict:
    files = corpus_files(path, sample)
    groups = [files[i::rounds] for i in range(rounds) if files[i::rounds]]
    embedders: dict[str, CachedEmbedding] = {}
    runs: dict[str, BackendRun] = {}
    for b in COMPARED:
        embedders[b], runs[b] = load(b, threads)
    with tempfile.TemporaryDirectory(prefix="localrag-bench-compare-") as tmp, RssSampler() as sampler:
        indexes = {
            b: DocumentIndex(IndexConfig(index_dir=Path(tmp) / b, embedding_backend=b), embedder=embedders[b])
            for b in COMPARED
        }
        for i, group in enumerate(groups):
            for b in alternate(COMPARED, i):
                run, stats = runs[b], embedders[b].stats
                texts, seconds = stats.texts, stats.seconds
                sampler.label = b
                report = indexes[b].ingest(group)
                sampler.label = None
                run.files += report.seen
                run.chunks += report.chunks
                run.failed += len(report.failed)
                run.pipeline_seconds += report.seconds
                run.round_pipeline_seconds.append(report.seconds)
                done, took = stats.texts - texts, stats.seconds - seconds
                run.embedded += done
                run.embed_seconds += took
                run.round_embed_rate.append(done / took if took else 0.0)
                print(
                    f"[compare] round {i + 1}/{len(groups)} {b}: {report.seen} files, {report.chunks} chunks, "
                    f"pipeline {report.seconds:.1f} s, embed {done} texts in {took:.1f} s",
                    file=sys.stderr,
                    flush=True,
                )
        cosine = stored_cosine(indexes["torch"], indexes["onnx"])
        for b in COMPARED:
            indexes[b].close()
            runs[b].peak_rss_mb = sampler.peaks.get(b, 0.0)
    if recall:
        for b in COMPARED:
            result = run_squad(backend=b, embedder=embedders[b])
            runs[b].recall = {m: result[m]["recall@5"] for m in ("dense", "bm25", "hybrid")}
    return summarize(path, files, runs, cosine)


def stored_vectors(index: DocumentIndex) -> dict[str, np.ndarray]:
    """text hash -> the vector the index stored for it (read back from Chroma, page by page)."""
    col = index._collection(index.space, create=False)
    out: dict[str, np.ndarray] = {}
    offset = 0
    while True:
        page = col.get(include=["embeddings", "metadatas"], limit=READ_PAGE, offset=offset)
        if not page["ids"]:
            return out
        for meta, vec in zip(page["metadatas"], page["embeddings"], strict=True):
            out[meta["text_hash"]] = np.asarray(vec, dtype=np.float32)
        offset += len(page["ids"])


def stored_cosine(old: DocumentIndex, new: DocumentIndex) -> dict:
    """Cosine between the two backends' stored vectors of every chunk text both indexed."""
    a, b = stored_vectors(old), stored_vectors(new)
    shared = sorted(a.keys() & b.keys())
    if not shared:
        return {}
    cos = np.einsum("ij,ij->i", np.stack([a[k] for k in shared]), np.stack([b[k] for k in shared]))
    return {
        "chunks": len(shared),
        "min": round(float(cos.min()), 4),
        "p1": round(float(np.percentile(cos, 1)), 4),
        "median": round(float(np.median(cos)), 4),
    }


def summarize(path: Path, files: list[Path], runs: dict[str, BackendRun], cosine: dict) -> dict:
    old, new = runs["torch"], runs["onnx"]
    round_pipeline = median_ratio(old.round_pipeline_seconds, new.round_pipeline_seconds)
    round_embed = median_ratio(new.round_embed_rate, old.round_embed_rate)
    return {
        "corpus": str(path),
        "files": len(files),
        "corpus_mb": round(sum(f.stat().st_size for f in files) / 1e6, 2),
        "rounds": len(old.round_pipeline_seconds),
        "same_chunks": old.chunks == new.chunks,
        "torch": old.to_dict(),
        "onnx": new.to_dict(),
        "embed_speedup": round(new.embed_chunks_per_s / old.embed_chunks_per_s, 3) if old.embed_seconds else None,
        "pipeline_speedup": round(old.pipeline_seconds / new.pipeline_seconds, 3) if new.pipeline_seconds else None,
        "embed_speedup_round_median": round(round_embed, 3) if round_embed is not None else None,
        "pipeline_speedup_round_median": round(round_pipeline, 3) if round_pipeline is not None else None,
        "process_peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "cosine_onnx_to_torch": cosine,
    }


def print_compare(result: dict) -> None:
    print(
        f"corpus {result['corpus']}: {result['files']} files, {result['corpus_mb']} MB, "
        f"{result['rounds']} interleaved rounds; same chunks for both: {result['same_chunks']}"
    )
    t, o = result["torch"], result["onnx"]
    rows = [
        ("threads", t["threads"], o["threads"]),
        ("model load", f"{t['load_seconds']} s, +{t['load_rss_mb']} MB", f"{o['load_seconds']} s, +{o['load_rss_mb']} MB"),
        ("chunks indexed", t["chunks"], o["chunks"]),
        ("embed chunks/s", t["embed_chunks_per_s"], o["embed_chunks_per_s"]),
        ("whole pipeline", f"{t['pipeline_seconds']} s", f"{o['pipeline_seconds']} s"),
        ("pipeline chunks/s", t["pipeline_chunks_per_s"], o["pipeline_chunks_per_s"]),
        ("peak RSS (ingesting)", f"{t['peak_rss_mb']} MB", f"{o['peak_rss_mb']} MB"),
    ]
    if t["recall"]:
        rows += [(f"SQuAD recall@5 {m}", t["recall"][m], o["recall"][m]) for m in ("dense", "hybrid")]
    print(table([("", 24), ("torch (fp32)", 34), ("onnx (int8)", 34)], rows, sep=""))
    print(
        f"onnx / torch: embed {result['embed_speedup']}x chunks/s "
        f"(median of rounds {result['embed_speedup_round_median']}x), whole pipeline {result['pipeline_speedup']}x "
        f"faster (median of rounds {result['pipeline_speedup_round_median']}x); "
        f"process peak RSS {result['process_peak_rss_mb']} MB (both models loaded)"
    )
    cos = result["cosine_onnx_to_torch"]
    if cos:
        print(
            f"cosine of the stored ONNX vectors to the torch ones over {cos['chunks']} distinct chunks: "
            f"min {cos['min']}, 1st percentile {cos['p1']}, median {cos['median']}"
        )


def add_bench_cli(bench_subparsers) -> None:
    p = bench_subparsers.add_parser("ingest", help="ingest throughput (MB/s, chunks/s) and re-ingest ratio")
    p.add_argument(
        "path", nargs="?", default=str(PYTHON_DOCS), help="folder or file (default: Python docs)"
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
        return output(result, args.json, print_compare)
    return output(run_ingest_bench(path), args.json, print_ingest)


def print_ingest(result: dict) -> None:
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
