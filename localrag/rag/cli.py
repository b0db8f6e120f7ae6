"""Document commands of ``python -m localrag``: ingest, search, docs list / remove.

    python -m localrag ingest ~/papers notes.md --collection work
    python -m localrag ingest docs/ --json
    python -m localrag search "how is the cache invalidated?" --k 5
    python -m localrag search "when was it changed?" --history chat.json   # a follow-up
    python -m localrag docs list
    python -m localrag docs remove notes.md
    python -m localrag check [--repair] [--json]          # the index's own fsck (localrag.rag.check)

``--index-dir`` (or LOCALRAG_INDEX_DIR) chooses the index folder;
LOCALRAG_CHROMA_HOST / LOCALRAG_CHROMA_PORT select a shared Chroma server.
A store that cannot be reached, or a collection that needs re-embedding, is one
``error:`` line on stderr and exit status 2, never a traceback or an empty answer.
Ctrl-C (SIGINT) stops an ingest at its next batch boundary: it prints what was done and what was
not, and exits 130; running the same ingest again does the rest. A second Ctrl-C quits at once
(still exit 130, no traceback; the next ingest cleans up what was half written).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path

from tqdm import tqdm

from localrag.config import default_data_dir
from localrag.rag.check import CheckReport, IndexCheck
from localrag.rag.config import IndexConfig
from localrag.rag.followup import HistoryError, read_history, search_query
from localrag.rag.index import DocumentIndex, NeedsReindex
from localrag.rag.records import IngestEvent, IngestReport, WatchedFolder
from localrag.rag.store import StoreError, StoreUnavailable


def add_cli(subparsers) -> None:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--collection", default=None, help="named collection (default: 'default')")
    common.add_argument(
        "--index-dir", default=None, help="index folder (default: LOCALRAG_INDEX_DIR or docs_index/)"
    )
    common.add_argument("--json", action="store_true", help="machine-readable output")

    ing = subparsers.add_parser("ingest", parents=[common], help="add files and folders to the index")
    ing.add_argument("paths", nargs="+", metavar="PATH")
    ing.add_argument(
        "--keep-missing",
        action="store_true",
        help="keep documents whose files are gone from a folder given here (listed as missing)",
    )
    ing.add_argument(
        "--max-file-mb", type=int, default=None, help="refuse larger files (default 256; 0 = no limit)"
    )
    ing.set_defaults(func=cmd_ingest)

    se = subparsers.add_parser("search", parents=[common], help="hybrid search over the index")
    se.add_argument("query")
    se.add_argument("--k", type=int, default=5, help="number of chunks to return")
    se.add_argument("--history", default=None, metavar="FILE.json",
                    help='earlier turns, a JSON list of {"role", "content"}: a follow-up searches with '
                         "the earlier questions' key terms, as the app does")
    se.set_defaults(func=cmd_search)

    docs = subparsers.add_parser("docs", help="list or remove indexed documents")
    docs_sub = docs.add_subparsers(dest="docs_command", required=True)
    ls = docs_sub.add_parser(
        "list", parents=[common], help="watched folders, then documents with chunk counts and status"
    )
    ls.set_defaults(func=cmd_docs_list)
    rm = docs_sub.add_parser("remove", parents=[common], help="remove a document (or a folder of them)")
    rm.add_argument("path")
    rm.set_defaults(func=cmd_docs_remove)
    cols = docs_sub.add_parser("collections", parents=[common], help="named collections in the index")
    cols.set_defaults(func=cmd_collections)

    ck = subparsers.add_parser("check", parents=[common],
                               help="check that the index is whole and consistent (exit 1 if not); --repair fixes it")
    ck.add_argument("--repair", action="store_true", help="fix what can be fixed, then check again")
    ck.add_argument("--drop-missing", action="store_true",
                    help="with --repair: drop the documents whose files are gone from disk")
    ck.add_argument("--quick", action="store_true",
                    help="the cheap part only: no reachability sweep, no content hashes (what the app runs at start)")
    ck.add_argument("--data-dir", default=None,
                    help="the app's data folder, whose upload copies are checked for orphans "
                         "(default: LOCALRAG_DATA_DIR or data/)")
    ck.set_defaults(func=cmd_check)


def open_index(args, **overrides) -> DocumentIndex:
    return DocumentIndex(
        IndexConfig.from_env(collection=args.collection, index_dir=args.index_dir, **overrides)
    )


def shown(text: str) -> str:
    """A path or reason on one line: control characters (a newline in a file name) escaped."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


def fail(message: str) -> int:
    print(f"error: {shown(message)}", file=sys.stderr)
    return 2


def say_waiting(event: IngestEvent) -> None:
    print(f"waiting: {event.reason}", file=sys.stderr, flush=True)


class TqdmProgress:
    """A progress bar on a terminal (stderr): bytes done, files, chunks/s and the ETA.
    The wait for another writer is said on stderr whether or not it is a terminal."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.bar = None

    def __call__(self, event: IngestEvent) -> None:
        if event.kind == "waiting":
            say_waiting(event)
            return
        if event.kind == "repair":
            if self.bar is not None:
                self.bar.write(f"repair: {event.reason}", file=sys.stderr)
            elif self.enabled:
                print(f"repair: {event.reason}", file=sys.stderr, flush=True)
            return
        if not self.enabled:
            return
        if event.kind == "start":
            self.bar = tqdm(
                total=max(1, event.bytes_total),
                desc="ingest",
                file=sys.stderr,
                bar_format="{desc}: {percentage:3.0f}%|{bar}| {postfix}",
            )
        elif self.bar is None:
            return
        elif event.kind == "done":
            self.bar.close()
            return
        self.bar.n = min(self.bar.total, event.bytes_done)
        name = shown(event.path.rsplit("/", 1)[-1][:40])
        self.bar.set_postfix_str(f"{event.progress_line()}  {name}")
        if event.kind == "file_done" and event.status == "failed":
            self.bar.write(f"failed: {shown(event.path)}: {shown(event.reason)}", file=sys.stderr)


INTERRUPTED = 130  # exit status of a run stopped by SIGINT (128 + 2), as shells report it
NOT_DONE_SHOWN = 20  # files not done listed by name in the text report (--json lists all)


@contextlib.contextmanager
def stop_on_sigint(cancel: threading.Event) -> Iterator[None]:
    """While inside: the first SIGINT sets ``cancel`` (the ingest stops at its next batch
    boundary), a second one raises KeyboardInterrupt. The previous handler is restored after."""

    def handler(signum, frame) -> None:
        if cancel.is_set():
            raise KeyboardInterrupt
        cancel.set()
        print("stopping after the current batch (Ctrl-C again to quit at once)", file=sys.stderr, flush=True)

    if threading.current_thread() is not threading.main_thread():  # signals reach the main thread only
        yield
        return
    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def cmd_ingest(args) -> int:
    cancel = threading.Event()
    with stop_on_sigint(cancel):
        try:
            index = open_index(args, max_file_mb=args.max_file_mb)
            report = index.ingest(
                args.paths,
                progress=TqdmProgress(sys.stderr.isatty() and not args.json),
                keep_missing=args.keep_missing,
                cancel=cancel,
            )
        except KeyboardInterrupt:
            print("interrupted: files committed so far stay indexed; run the same ingest again to finish "
                  "(it also deletes what was half written)", file=sys.stderr)
            return INTERRUPTED
        except StoreUnavailable as exc:
            _print_report(exc.report, args.json)
            return fail(str(exc))
        except StoreError as exc:
            return fail(str(exc))
    _print_report(report, args.json)
    if report.stopped:
        print(f"stopped: {len(report.not_done)} file(s) not done; run the same ingest again to finish them",
              file=sys.stderr)
        return INTERRUPTED
    return 0 if report.seen and len(report.failed) < report.seen else (1 if report.failed else 0)


def _print_report(report: IngestReport, as_json: bool) -> None:
    if as_json:
        print(json.dumps(report.to_dict(), ensure_ascii=False, indent=2))
        return
    print(report.summary())
    for path, reason in report.failed:
        print(f"  failed: {shown(path)}: {shown(reason)}")
    for path in report.removed:
        print(f"  removed (gone from disk): {shown(path)}")
    for path in report.missing:
        print(f"  missing (kept): {shown(path)}")
    for line in report.repaired:
        print(f"  repaired: {shown(line)}")
    for path in report.not_done[:NOT_DONE_SHOWN]:
        print(f"  not done (stopped): {shown(path)}")
    if len(report.not_done) > NOT_DONE_SHOWN:
        print(f"  ... and {len(report.not_done) - NOT_DONE_SHOWN} more not done (--json lists them all)")


def cmd_search(args) -> int:
    query = args.query
    if args.history:
        try:
            query = search_query(args.query, read_history(args.history))
        except HistoryError as exc:
            return fail(str(exc))
        print(f'searched: "{shown(query)}"', file=sys.stderr)
    try:
        hits = open_index(args).search(query, k=args.k)
    except (StoreUnavailable, StoreError, NeedsReindex) as exc:
        return fail(str(exc))
    if args.json:
        print(json.dumps([h.to_dict() for h in hits], ensure_ascii=False, indent=2))
        return 0
    if not hits:
        print("no results")
    for rank, h in enumerate(hits, start=1):
        dense = "-" if h.dense_score is None else f"{h.dense_score:.3f}"
        bm25 = "-" if h.bm25_score is None else f"{h.bm25_score:.2f}"
        section = f"  [{' > '.join(h.heading_path)}]" if h.heading_path else ""
        print(f"{rank}. {shown(h.citation())}{shown(section)}  fused={h.fused_score:.4f} dense={dense} bm25={bm25}")
        print(f"   {h.snippet()}")
    return 0


def cmd_docs_list(args) -> int:
    index = open_index(args)
    docs, watched = index.list_documents(), index.watched_folders()
    if args.json:
        listing = {"documents": [d.to_dict() for d in docs], "watched": [w.to_dict() for w in watched]}
        print(json.dumps(listing, ensure_ascii=False, indent=2))
        return 0
    for w in watched:
        print(f"{'watched':8} {w.indexed:6} files   {shown(w.folder)}  ({watch_summary(w)})")
    if not docs:
        print("no documents")
    for d in docs:
        extra = f"  ({shown(d.reason)})" if d.reason else ""
        print(f"{d.status:8} {d.chunks:6} chunks  {shown(d.path)}{extra}")
    return 0


def watch_summary(w: WatchedFolder) -> str:
    """'340 chunks, 1 failed, last sync 2026-12-01 10:00:03' (and the last error, if any)."""
    parts = [f"{w.chunks} chunks"]
    parts += [f"{n} {what}" for n, what in ((len(w.failed), "failed"), (w.missing, "missing"), (w.stale, "stale")) if n]
    parts.append("never synced" if w.last_sync is None else f"last sync {when(w.last_sync)}")
    if w.last_error:
        parts.append(f"last attempt failed: {shown(w.last_error)}")
    return ", ".join(parts)


def when(timestamp: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(timestamp))


def cmd_docs_remove(args) -> int:

    try:
        n = open_index(args).remove(args.path, progress=say_waiting)
    except (StoreUnavailable, StoreError) as exc:
        return fail(str(exc))
    if args.json:
        print(json.dumps({"removed": n}))
    else:
        print(f"removed {n} document(s)" if n else f"not in the index: {shown(args.path)}")
    return 0 if n else 1


def cmd_collections(args) -> int:
    names = open_index(args).collections()
    print(json.dumps(names) if args.json else "\n".join(names) or "no collections")
    return 0


def cmd_check(args) -> int:
    data_dir = Path(args.data_dir) if args.data_dir else default_data_dir()
    try:
        index = open_index(args)
        checker = IndexCheck(index, uploads_dir=data_dir / "uploads")
        report = checker.run(full=not args.quick)
        before = report
        if args.repair and not report.ok:
            report = checker.repair(report, drop_missing=args.drop_missing)
    except (StoreUnavailable, StoreError, NeedsReindex) as exc:
        return fail(str(exc))
    if args.json:
        out = report.to_dict()
        if args.repair:
            out["found"] = [asdict(p) for p in before.problems]
        print(json.dumps(out, ensure_ascii=False, indent=2))
        return 0 if report.ok else 1
    if args.repair:
        for p in before.problems:
            print(f"found    {shown(p.line())}")
        for line in report.repaired:
            print(f"repaired {shown(line)}")
    for p in report.problems:
        print(f"problem  {shown(p.line())}")
    print(_check_summary(report, args.repair))
    if not report.ok and not args.repair:
        print("run `python -m localrag check --repair` to fix what can be fixed", file=sys.stderr)
    return 0 if report.ok else 1


def _check_summary(report: CheckReport, repaired: bool) -> str:
    head = ("after repair: " if repaired else "") + report.summary()
    took = sum(report.timings.values())
    sweep = ""
    if report.swept:
        per_10k = report.timings["reachability"] * 10_000 / report.swept
        sweep = f"; {report.swept} vectors queried with themselves in {report.timings['reachability']:.2f} s " \
                f"({per_10k:.1f} s per 10,000)"
    return f"{head} (collection {report.collection!r}, checked in {took:.2f} s{sweep})"
