"""Watch commands of ``python -m localrag``: keep folders in sync with a collection.

    python -m localrag watch ~/notes ~/papers --collection work    # remember them, sync, follow changes
    python -m localrag watch --collection work                     # every folder the collection watches
    python -m localrag watch ~/notes --once                        # remember and sync, then exit
    python -m localrag unwatch ~/notes [--delete]                  # forget it (documents stay unless --delete)

Watched folders are remembered in the index (``docs list`` shows them with their counts, failed
files and last sync), so the app syncs and follows them at every start. ``watch`` runs until
Ctrl-C (or SIGTERM), printing each change; ``--json`` prints one JSON line per sync instead.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading

from localrag.rag.cli import TqdmProgress, fail, open_index, say_waiting, shown
from localrag.rag.index import DocumentIndex
from localrag.rag.manifest import WatchRecord
from localrag.rag.records import IngestEvent
from localrag.rag.store import StoreUnavailable
from localrag.rag.watch import FolderWatcher, SyncOutcome


def add_cli(subparsers) -> None:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--collection", default=None, help="named collection (default: 'default')")
    common.add_argument(
        "--index-dir", default=None, help="index folder (default: LOCALRAG_INDEX_DIR or docs_index/)"
    )

    w = subparsers.add_parser(
        "watch", parents=[common], help="keep folders in sync with a collection (remembered; the app follows them too)"
    )
    w.add_argument("paths", nargs="*", metavar="PATH", help="folders to add (none: every folder the collection watches)")
    w.add_argument("--once", action="store_true", help="sync once and exit instead of following changes")
    w.add_argument(
        "--debounce", type=float, default=1.0, help="seconds without events before a folder is synced (default 1)"
    )
    w.add_argument("--json", action="store_true", help="one JSON line per sync instead of one line per change")
    w.set_defaults(func=cmd_watch)

    u = subparsers.add_parser("unwatch", parents=[common], help="stop keeping a folder in sync")
    u.add_argument("path")
    u.add_argument("--delete", action="store_true", help="also remove the folder's documents from the index")
    u.set_defaults(func=cmd_unwatch)


def cmd_watch(args) -> int:
    if args.debounce < 0:
        return fail(f"--debounce must be >= 0, got {args.debounce}")
    index = open_index(args)
    coll = index.config.collection
    try:
        roots = [index.watch(path) for path in args.paths]
    except ValueError as exc:
        return fail(str(exc))
    records = [r for r in index.manifest.watches(coll) if not roots or r.folder in roots]
    if not records:
        return fail(f"collection {coll!r} watches no folder yet; add one: python -m localrag watch PATH")
    try:
        if args.once:
            return _sync_once(index, records, args.json)
        return _follow(index, records, args)
    finally:
        index.close()


def _sync_once(index: DocumentIndex, records: list[WatchRecord], as_json: bool) -> int:
    status = 0
    for rec in records:
        progress = TqdmProgress(sys.stderr.isatty() and not as_json)
        try:
            report = index.sync(rec.folder, progress=progress)
        except NotADirectoryError as exc:
            index.manifest.record_sync(rec.collection, rec.folder, error=str(exc))
            print(f"error: {shown(str(exc))} (its documents are kept)", file=sys.stderr)
            status = 1
            continue
        except StoreUnavailable as exc:
            return fail(str(exc))
        _ChangePrinter(as_json).synced(SyncOutcome(rec.collection, rec.folder, report, full=True))
    return status


def _follow(index: DocumentIndex, records: list[WatchRecord], args) -> int:
    printer = _ChangePrinter(args.json)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda signum, frame: stop.set())
    watcher = FolderWatcher(
        lambda _collection: index, debounce_s=args.debounce, on_progress=printer.progress, on_synced=printer.synced
    )
    with watcher:
        watcher.resume(records)
        folders = ", ".join(shown(r.folder) for r in records)
        print(f"watching {folders} (collection {index.config.collection}); Ctrl-C stops", file=sys.stderr, flush=True)
        try:
            while not stop.wait(1.0):
                pass
        except KeyboardInterrupt:
            pass
    print("stopped watching", file=sys.stderr, flush=True)
    return 0


class _ChangePrinter:
    """Each change on its own line (stdout), the wait for another writer on stderr; with ``as_json``
    one JSON line per sync: the folder and its report (or error)."""

    def __init__(self, as_json: bool) -> None:
        self.as_json = as_json

    def progress(self, collection: str, folder: str, event: IngestEvent) -> None:
        if event.kind == "waiting":
            say_waiting(event)
        if self.as_json:
            return
        if event.kind == "file_done" and event.status == "failed":
            print(f"failed: {shown(event.path)}: {shown(event.reason)}", flush=True)
        elif event.kind == "file_done" and event.status in ("added", "replaced", "moved"):
            print(f"{event.status}: {shown(event.path)} ({event.chunks} chunks)", flush=True)
        elif event.kind == "removed":
            print(f"{event.status}: {shown(event.path)}", flush=True)

    def synced(self, outcome: SyncOutcome) -> None:
        if self.as_json:
            line = {"collection": outcome.collection, "folder": outcome.folder, "full": outcome.full,
                    "report": outcome.report.to_dict() if outcome.report else None, "error": outcome.error}
            print(json.dumps(line, ensure_ascii=False), flush=True)
        elif outcome.error:
            print(f"error: sync of {shown(outcome.folder)} failed: {shown(outcome.error)}", file=sys.stderr, flush=True)
        elif outcome.full:
            print(f"synced {shown(outcome.folder)}: {outcome.report.summary()}", flush=True)


def cmd_unwatch(args) -> int:
    index = open_index(args)
    try:
        if not index.unwatch(args.path):
            print(f"not watched: {shown(args.path)}", file=sys.stderr)
            return 1
        removed = index.remove(args.path, progress=say_waiting) if args.delete else 0
    except StoreUnavailable as exc:
        return fail(str(exc))
    finally:
        index.close()
    kept = f"removed {removed} document(s)" if args.delete else "its documents stay (--delete removes them)"
    print(f"stopped watching {shown(args.path)}; {kept}")
    return 0
