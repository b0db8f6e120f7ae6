"""Document search benchmark: recall@1/5/10 of the gold paragraph, dense vs BM25 vs hybrid.

    python -m localrag bench search --suite squad [--json] [--limit N] [--sweep]   # alias: bench retrieval

Suite ``squad``: SQuAD v2.0 dev (:mod:`localrag.bench.data`). Its 1,204 paragraphs are written as
files and ingested through the normal pipeline into a temporary index; the answerable questions
are the queries. Rankings are over paragraphs (a paragraph's best chunk counts). ``--sweep`` also
prints recall@5 for a few RRF settings so the chosen defaults can be checked, not just asserted.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from localrag.bench.common import output, table, timed
from localrag.bench.data import doc_number, squad, write_corpus
from localrag.rag.config import EMBEDDING_BACKENDS, IndexConfig
from localrag.rag.index import DocumentIndex
from localrag.rag.retrieve import rrf_fuse

KS = (1, 5, 10)


def load_squad() -> tuple[list[str], list[tuple[str, int]]]:
    """(paragraphs, [(question, gold paragraph index)]) for answerable questions."""
    paragraphs = [p.context for art in squad() for p in art.paragraphs]
    queries = [(q.question, i) for i, p in enumerate(p for art in squad() for p in art.paragraphs)
               for q in p.questions if q.answers]
    return paragraphs, queries


def _recall(ranked: list[list[int]], gold: list[int]) -> dict[str, float]:
    return {f"recall@{k}": sum(g in r[:k] for r, g in zip(ranked, gold, strict=True)) / len(gold) for k in KS}


def _paragraph_order(chunk_ids: list[str], para_of_ver: dict[str, int]) -> list[int]:
    """The paragraphs of a chunk ranking, each at its best chunk's place."""
    return list(dict.fromkeys(para_of_ver[cid.split(":", 1)[0]] for cid in chunk_ids))


def run_squad(limit: int | None = None, sweep: bool = False, backend: str = "onnx", embedder=None) -> dict:
    """Recall of the gold paragraph on SQuAD v2 dev; ``backend`` picks the embedder ("onnx"/"torch"),
    ``embedder`` reuses an already-loaded one of that backend (its stats keep counting)."""
    paragraphs, queries = load_squad()
    if limit:
        queries = queries[:limit]
    with tempfile.TemporaryDirectory(prefix="localrag-squad-") as tmp:
        write_corpus(paragraphs, Path(tmp) / "corpus")
        cfg = IndexConfig(index_dir=Path(tmp) / "index", embedding_backend=backend)
        index = DocumentIndex(cfg, embedder=embedder)
        report, ingest_s = timed(index.ingest, [Path(tmp) / "corpus"])
        para_of_ver = {rec.ver: doc_number(rec.path) for rec in index.manifest.files(cfg.collection)}

        def rank_all() -> tuple[list[list[str]], list[list[str]]]:
            dense_runs, bm25_runs = [], []
            vectors = index.embedder.embed([q for q, _ in queries])
            for (q, _), vec in zip(queries, vectors, strict=True):
                dense, lexical = index.rank(q, cfg.candidates, vector=vec)
                dense_runs.append([c for c, _ in dense])
                bm25_runs.append([c for c, _ in lexical])
            return dense_runs, bm25_runs

        (dense_runs, bm25_runs), query_s = timed(rank_all)
        gold = [g for _, g in queries]

        def hybrid(k_rrf: int, wd: float, wb: float) -> list[list[int]]:
            return [
                _paragraph_order([c for c, _ in rrf_fuse([b, d], [wb, wd], k_rrf)], para_of_ver)
                for d, b in zip(dense_runs, bm25_runs, strict=True)
            ]

        result = {
            "suite": "squad-v2-dev",
            "embedder": index.emb_fp,
            "paragraphs": len(paragraphs),
            "queries": len(queries),
            "chunks": report.chunks,
            "ingest_seconds": round(ingest_s, 2),
            "query_seconds": round(query_s, 2),
            "rrf": {"k": cfg.rrf_k, "dense_weight": cfg.dense_weight, "bm25_weight": cfg.bm25_weight},
            "dense": _recall([_paragraph_order(r, para_of_ver) for r in dense_runs], gold),
            "bm25": _recall([_paragraph_order(r, para_of_ver) for r in bm25_runs], gold),
            "hybrid": _recall(hybrid(cfg.rrf_k, cfg.dense_weight, cfg.bm25_weight), gold),
        }
        if sweep:
            result["sweep_recall@5"] = {
                f"k={k},wd={wd},wb={wb}": round(_recall(hybrid(k, wd, wb), gold)["recall@5"], 4)
                for k in (10, 30, 60, 100)
                for wd, wb in ((1.0, 1.0), (1.0, 0.7), (0.7, 1.0))
            }
        index.close()
    best_single = max(result["dense"]["recall@5"], result["bm25"]["recall@5"])
    result["target_met"] = result["hybrid"]["recall@5"] >= 0.85 and result["hybrid"]["recall@5"] >= best_single
    return result


def add_bench_cli(bench_subparsers) -> None:
    p = bench_subparsers.add_parser("search", aliases=["retrieval"],
                                    help="document search, recall@1/5/10: dense vs BM25 vs hybrid")
    p.add_argument("--suite", choices=["squad"], default="squad")
    p.add_argument("--limit", type=int, default=None, help="only the first N questions")
    p.add_argument("--sweep", action="store_true", help="also print recall@5 for other RRF settings")
    p.add_argument("--embedder", choices=EMBEDDING_BACKENDS, default="onnx", help="embedding backend (default onnx)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_search)


def cmd_search(args) -> int:
    return output(run_squad(limit=args.limit, sweep=args.sweep, backend=args.embedder), args.json, print_search)


def print_search(result: dict) -> None:
    print(
        f"{result['suite']}: {result['paragraphs']} paragraphs ({result['chunks']} chunks), "
        f"{result['queries']} questions; ingest {result['ingest_seconds']} s, queries {result['query_seconds']} s"
    )
    print(f"embedder {result['embedder']}")
    print(table([("method", 8), *((f"recall@{k}", 10) for k in KS)],
                [[m, *(f"{result[m][f'recall@{k}']:.4f}" for k in KS)] for m in ("dense", "bm25", "hybrid")]))
    for name, value in result.get("sweep_recall@5", {}).items():
        print(f"  sweep {name}: recall@5 {value}")
    print("target (hybrid r@5 >= 0.85 and >= best single):", "met" if result["target_met"] else "NOT met")
