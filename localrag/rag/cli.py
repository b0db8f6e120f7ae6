"""Document commands of ``python -m localrag``: ingest, search, docs list / remove.

    python -m localrag ingest ~/papers notes.md --collection work
    python -m localrag ingest docs/ --json
    python -m localrag search "how is the cache invalidated?" --k 5
    python -m localrag docs list
    python -m localrag docs remove notes.md

``--index-dir`` (or LOCALRAG_INDEX_DIR) chooses the index folder;
LOCALRAG_CHROMA_HOST / LOCALRAG_CHROMA_PORT select a shared Chroma server.
"""

from __future__ import annotations

import argparse
import json
import sys

from localrag.rag.config import IndexConfig
from localrag.rag.records import IngestEvent


def add_cli(subparsers) -> None:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--collection", default=None, help="named collection (default: 'default')")
    common.add_argument(
        "--index-dir", default=None, help="index folder (default: LOCALRAG_INDEX_DIR or docs_index/)"
    )
    common.add_argument("--json", action="store_true", help="machine-readable output")

    ing = subparsers.add_parser("ingest", parents=[common], help="add files and folders to the index")
    ing.add_argument("paths", nargs="+", metavar="PATH")
    ing.set_defaults(func=cmd_ingest)

    se = subparsers.add_parser("search", parents=[common], help="hybrid search over the index")
    se.add_argument("query")
    se.add_argument("--k", type=int, default=5, help="number of chunks to return")
    se.set_defaults(func=cmd_search)

    docs = subparsers.add_parser("docs", help="list or remove indexed documents")
    docs_sub = docs.add_subparsers(dest="docs_command", required=True)
    ls = docs_sub.add_parser("list", parents=[common], help="documents with chunk counts and status")
    ls.set_defaults(func=cmd_docs_list)
    rm = docs_sub.add_parser("remove", parents=[common], help="remove a document (or a folder of them)")
    rm.add_argument("path")
    rm.set_defaults(func=cmd_docs_remove)
    cols = docs_sub.add_parser("collections", parents=[common], help="named collections in the index")
    cols.set_defaults(func=cmd_collections)


def _index(args):
    from localrag.rag.index import DocumentIndex

    return DocumentIndex(IndexConfig.from_env(collection=args.collection, index_dir=args.index_dir))


class _TqdmProgress:
    """Per-file progress bar on a terminal (stderr); silent otherwise."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.bar = None

    def __call__(self, event: IngestEvent) -> None:
        if not self.enabled:
            return
        from tqdm import tqdm

        if event.kind == "start":
            self.bar = tqdm(total=event.total, unit="file", desc="ingest", file=sys.stderr)
        elif self.bar is None:
            return
        elif event.kind in ("file_start", "chunks"):
            name = event.path.rsplit("/", 1)[-1][:40]
            self.bar.set_postfix_str(f"{name} {event.chunks} chunks" if event.chunks else name)
        elif event.kind == "file_done":
            self.bar.update(1)
            if event.status == "failed":
                self.bar.write(f"failed: {event.path}: {event.reason}", file=sys.stderr)
        elif event.kind == "done":
            self.bar.close()


def cmd_ingest(args) -> int:
    index = _index(args)
    report = index.ingest(args.paths, progress=_TqdmProgress(sys.stderr.isatty() and not args.json))
    if args.json:
        print(json.dumps(report.to_dict(), ensure_ascii=False, indent=2))
    else:
        print(report.summary())
        for path, reason in report.failed:
            print(f"  failed: {path}: {reason}")
    return 0 if report.seen and len(report.failed) < report.seen else (1 if report.failed else 0)


def cmd_search(args) -> int:
    hits = _index(args).search(args.query, k=args.k)
    if args.json:
        print(json.dumps([h.to_dict() for h in hits], ensure_ascii=False, indent=2))
        return 0
    if not hits:
        print("no results")
    for rank, h in enumerate(hits, start=1):
        dense = "-" if h.dense_score is None else f"{h.dense_score:.3f}"
        bm25 = "-" if h.bm25_score is None else f"{h.bm25_score:.2f}"
        section = f"  [{' > '.join(h.heading_path)}]" if h.heading_path else ""
        print(f"{rank}. {h.citation()}{section}  fused={h.fused_score:.4f} dense={dense} bm25={bm25}")
        print(f"   {h.snippet()}")
    return 0


def cmd_docs_list(args) -> int:
    docs = _index(args).list_documents()
    if args.json:
        print(json.dumps([d.to_dict() for d in docs], ensure_ascii=False, indent=2))
        return 0
    if not docs:
        print("no documents")
    for d in docs:
        extra = f"  ({d.reason})" if d.reason else ""
        print(f"{d.status:8} {d.chunks:6} chunks  {d.path}{extra}")
    return 0


def cmd_docs_remove(args) -> int:
    n = _index(args).remove(args.path)
    if args.json:
        print(json.dumps({"removed": n}))
    else:
        print(f"removed {n} document(s)" if n else f"not in the index: {args.path}")
    return 0 if n else 1


def cmd_collections(args) -> int:
    names = _index(args).collections()
    print(json.dumps(names) if args.json else "\n".join(names) or "no collections")
    return 0
