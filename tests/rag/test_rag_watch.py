"""Folders kept in sync: a real watchdog observer on real files, real Chroma and the ONNX MiniLM.

A file created, edited, renamed and deleted in a watched folder is reflected in the index (a second
or two each on a quiet machine; the tests wait up to ``WAIT_S`` and say how long they waited); a
change made while no watcher ran is caught when one starts again; the manifest, Chroma's ids and
BM25 agree after every step (``assert_consistent``).

Run: .venv/bin/python -m pytest tests/rag/test_rag_watch.py -q
"""

from __future__ import annotations

import json
import os
import queue
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from rag_docgen import assert_consistent, write

from localrag.__main__ import main
from localrag.rag.watch import FolderWatcher

WAIT_S = 120.0  # generous: the machine running the tests may be loaded; no speed is asserted
ROOT = Path(__file__).resolve().parents[2]


def until(condition, timeout: float = WAIT_S) -> float:
    """Seconds until ``condition()`` held; fails the test past ``timeout``, saying how long it waited."""
    start = time.monotonic()
    while not condition():
        if time.monotonic() - start > timeout:
            pytest.fail(f"not reflected after waiting {time.monotonic() - start:.1f} s")
        time.sleep(0.05)
    return time.monotonic() - start


def idle(watcher) -> None:
    """The watcher has no sync pending or running, waiting up to ``WAIT_S``."""
    start = time.monotonic()
    assert watcher.wait_idle(WAIT_S), f"the watcher was still busy after waiting {time.monotonic() - start:.1f} s"


def indexed(idx) -> dict[str, str]:
    """Indexed file name -> content hash, from the manifest."""
    return {Path(r.path).name: r.content_hash for r in idx.manifest.files(idx.config.collection)}


def found(idx, query: str) -> set[str]:
    return {Path(h.file).name for h in idx.search(query, k=10)}


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    notes = tmp_path / "notes"
    write(notes / "alpha.md", "# Falcons\n\nThe falcon nests on the copper ridge above the harbor.\n")
    write(notes / "sub" / "beta.txt", "Glaciers carve the canyon one winter at a time.\n")
    return notes


def watcher_for(idx, **kw) -> FolderWatcher:
    kw.setdefault("debounce_s", 0.2)
    kw.setdefault("check_s", 0.2)
    return FolderWatcher(lambda collection: idx, **kw)


def test_create_edit_rename_delete_are_reflected_and_a_restart_catches_up(make_index, folder):
    idx = make_index()
    with watcher_for(idx) as watcher:
        assert watcher.watch("default", folder) == str(folder)
        until(lambda: set(indexed(idx)) == {"alpha.md", "beta.txt"})  # the first full sync
        idle(watcher)
        assert_consistent(idx)

        write(folder / "gamma.md", "# Lanterns\n\nLanterns of violet glass light the meadow path.\n")
        until(lambda: "gamma.md" in indexed(idx))
        assert "gamma.md" in found(idx, "violet glass lanterns")

        before = indexed(idx)["gamma.md"]
        write(folder / "gamma.md", "# Lanterns\n\nLanterns of amber quartz light the summit trail.\n")
        until(lambda: indexed(idx).get("gamma.md", before) != before)
        idle(watcher)
        texts = " ".join(h.text for h in idx.search("lanterns", k=10))
        assert "amber quartz" in texts and "violet glass" not in texts
        assert_consistent(idx)

        ver = idx.manifest.get("default", str(folder / "gamma.md")).ver
        os.rename(folder / "gamma.md", folder / "sub" / "delta.md")
        until(lambda: "delta.md" in indexed(idx) and "gamma.md" not in indexed(idx))
        moved = idx.manifest.get("default", str(folder / "sub" / "delta.md"))
        assert moved.ver == ver  # recognised as a move: the same chunks, nothing re-embedded
        assert found(idx, "amber quartz lanterns") >= {"delta.md"} and "gamma.md" not in found(idx, "lanterns")
        assert_consistent(idx)

        (folder / "sub" / "delta.md").unlink()
        until(lambda: "delta.md" not in indexed(idx))
        assert "delta.md" not in found(idx, "amber quartz lanterns")
        idle(watcher)
        assert_consistent(idx)

        # an editor's hidden swap file, and a file that came and went between two syncs: nothing
        write(folder / ".alpha.md.swp", "swap")
        write(folder / "4913", "x")
        (folder / "4913").unlink()
        write(folder / "epsilon.txt", "Thunder rolls over the tundra.\n")
        until(lambda: "epsilon.txt" in indexed(idx))
        idle(watcher)
        assert idx.list_documents() == [d for d in idx.list_documents() if d.status == "indexed"]
        assert set(indexed(idx)) == {"alpha.md", "beta.txt", "epsilon.txt"}

    # The watcher is stopped (the app is down): changes made now are caught at the next start.
    write(folder / "alpha.md", "# Falcons\n\nThe falcon left the ridge for the marble saddle.\n")
    (folder / "sub" / "beta.txt").unlink()
    write(folder / "zeta.md", "# Orbits\n\nA pilot charts the orbit by compass and signal.\n")
    time.sleep(0.5)
    assert "zeta.md" not in indexed(idx)
    restarted = time.time()
    with watcher_for(idx) as watcher:
        watcher.resume(idx.manifest.watches())
        until(lambda: set(indexed(idx)) == {"alpha.md", "epsilon.txt", "zeta.md"})
        idle(watcher)
    assert "marble saddle" in " ".join(h.text for h in idx.search("falcon ridge", k=5))
    assert_consistent(idx)
    [shown] = idx.watched_folders()
    assert (shown.folder, shown.indexed, shown.failed, shown.last_error) == (str(folder), 3, (), "")
    assert shown.last_sync is not None and shown.last_sync >= restarted  # the restart's sync


def test_watch_is_remembered_per_collection_and_unwatch_keeps_documents(make_index, folder, tmp_path):
    work, other = make_index(collection="work"), make_index(collection="other")
    write(folder / "broken.pdf", "not a pdf at all")
    assert work.watch(folder) == str(folder)
    work.watch(folder)  # twice: still one row
    assert [w.folder for w in work.manifest.watches("work")] == [str(folder)] and other.watched_folders() == []
    assert "work" in work.collections()
    [never] = work.watched_folders()
    assert never.last_sync is None and never.indexed == 0

    report = work.sync(folder)
    assert (report.added, len(report.failed)) == (2, 1)
    [w] = work.watched_folders()
    assert (w.indexed, w.chunks) == (2, 2) and w.last_sync is not None
    assert w.failed == ((str(folder / "broken.pdf"), w.failed[0][1]),) and "PDF" in w.failed[0][1]
    assert w.to_dict()["failed"] == [{"path": str(folder / "broken.pdf"), "reason": w.failed[0][1]}]

    assert work.unwatch(folder) and not work.unwatch(folder)
    assert work.watched_folders() == [] and len(work.list_documents()) == 3  # documents stay
    assert work.remove(folder) == 2 and work.list_documents() == []  # ...until asked
    assert_consistent(work)


def test_folders_that_cannot_be_watched_say_why(make_index, tmp_path, folder):
    idx = make_index(index_dir=tmp_path / "notes" / "index")
    with pytest.raises(ValueError, match="not a folder"):
        idx.watch(tmp_path / "nowhere")
    with pytest.raises(ValueError, match="not a folder"):
        idx.watch(folder / "alpha.md")
    with pytest.raises(ValueError, match="holds the index folder"):
        idx.watch(folder)
    (idx.dir / "inner").mkdir()
    with pytest.raises(ValueError, match="inside the index folder"):
        idx.watch(idx.dir / "inner")
    assert idx.manifest.watches() == []


def test_a_vanished_folder_keeps_its_documents_until_it_comes_back(make_index, folder, tmp_path):
    idx = make_index()
    with watcher_for(idx) as watcher:
        watcher.watch("default", folder)
        until(lambda: len(indexed(idx)) == 2)
        idle(watcher)
        away = tmp_path / "unplugged"
        os.rename(folder, away)  # an unmounted drive looks the same
        until(lambda: watcher.states()[0].state == "folder not found")
        time.sleep(0.5)
        assert set(indexed(idx)) == {"alpha.md", "beta.txt"}  # nothing was removed
        write(away / "new.md", "# Ember\n\nEmbers glow in the willow grove.\n")
        os.rename(away, folder)
        until(lambda: "new.md" in indexed(idx))
        idle(watcher)
        assert watcher.states()[0].state == "watching"
    assert_consistent(idx)


def test_stop_ends_a_running_sync_and_leaves_the_index_consistent(make_index, tmp_path):
    many = tmp_path / "many"
    for i in range(40):
        write(many / f"n{i:02d}.txt", f"Note {i}: the {i}th lantern of the harbor burns copper blue.\n")
    idx = make_index()
    first_file, outcomes = threading.Event(), []

    def on_progress(collection, folder, event):
        if event.kind == "file_done" and not first_file.is_set():
            first_file.set()
            while not watcher._stopping:  # hold the sync here until stop() was called
                time.sleep(0.01)

    watcher = watcher_for(idx, on_progress=on_progress, on_synced=outcomes.append).start()
    watcher.watch("default", many)
    assert first_file.wait(60)
    # a sync holds the write lock, never the store: a search (a chat answer's retrieval) goes on
    hits = []
    searcher = threading.Thread(target=lambda: hits.extend(idx.search("lantern of the harbor", k=3)))
    searcher.start()
    searcher.join(30)
    assert not searcher.is_alive() and hits
    assert watcher.stop(timeout=30)  # the sync ended at its next progress event
    assert outcomes == [] and 0 < len(indexed(idx)) < 40
    assert_consistent(idx)
    with watcher_for(idx) as again:  # the next start finishes the job
        again.resume(idx.manifest.watches())
        until(lambda: len(indexed(idx)) == 40)
        idle(again)
    assert_consistent(idx)


def test_unwatch_with_delete_during_a_sync_leaves_nothing_behind(make_index, tmp_path):
    many = tmp_path / "many"
    for i in range(40):
        write(many / f"n{i:02d}.txt", f"Note {i}: the {i}th lantern of the harbor burns copper blue.\n")
    idx = make_index()
    first_file = threading.Event()

    def on_progress(collection, folder, event):
        if event.kind == "file_done" and not first_file.is_set():
            first_file.set()
            while ("default", str(many)) not in watcher._cancelled:  # hold the sync until unwatch runs
                time.sleep(0.01)

    with watcher_for(idx, on_progress=on_progress) as watcher:
        watcher.watch("default", many)
        assert first_file.wait(60)
        was, removed = watcher.unwatch("default", many, delete=True)  # the running sync ends first
        assert was and removed >= 1
        assert watcher.states() == []
        idle(watcher)
        write(many / "late.txt", "A file written after the folder was unwatched.\n")
        time.sleep(1.0)
    assert idx.list_documents() == [] and idx.watched_folders() == []
    assert_consistent(idx)


def test_a_sync_of_changed_paths_looks_only_at_them(make_index, folder):
    idx = make_index()
    idx.watch(folder)
    idx.sync(folder)
    write(folder / "sub" / "beta.txt", "Glaciers carve the canyon, and rivers finish it.\n")
    write(folder / "later.md", "# Later\n\nNot reported by any event yet.\n")
    report = idx.sync(
        folder,
        changed=[folder / "sub" / "beta.txt", folder / "gone-before-sync.tmp", folder / ".hidden", "/elsewhere/x"],
    )
    assert (report.seen, report.replaced, report.failed) == (1, 1, [])
    assert "later.md" not in indexed(idx)  # a full sync would have found it
    assert idx.sync(folder, changed=[folder]).added == 1  # the folder itself: all of it
    assert_consistent(idx)


def _cli(capsys, *args: str) -> tuple[int, str, str]:
    """A command in this process (the watch command itself runs as a real process below)."""
    rc = main(list(args))
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.mark.slow
def test_cli_watch_unwatch_and_docs_list(tmp_path, folder, capsys):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    index = ["--index-dir", str(tmp_path / "index"), "--collection", "notes"]
    write(folder / "odd.xyz", "no parser for this")
    proc = subprocess.Popen(
        [sys.executable, "-m", "localrag", "watch", str(folder), "--json", "--debounce", "0.2", *index],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT,
    )  # fmt: skip
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout], daemon=True).start()
    try:
        first = json.loads(lines.get(timeout=120))  # the full sync on start
        assert (first["folder"], first["full"], first["error"]) == (str(folder), True, "")
        assert (first["report"]["added"], len(first["report"]["failed"])) == (2, 1)
        write(folder / "new.md", "# New\n\nA new note about the saddle of the summit.\n")
        try:
            change = json.loads(lines.get(timeout=WAIT_S))
        except queue.Empty:
            pytest.fail(f"watch printed no line for the new file within {WAIT_S:.0f} s")
        assert not change["full"] and change["report"]["added"] == 1
    finally:
        proc.terminate()  # SIGTERM: the watcher stops, the command says so and exits 0
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0 and "stopped watching" in err and "Traceback" not in err, err

    rc, out, _ = _cli(capsys, "docs", "list", *index)
    listing = out.splitlines()
    assert re.fullmatch(
        rf"watched +3 files   {re.escape(str(folder))}  \(3 chunks, 1 failed, last sync \d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d\)",
        listing[0],
    ), listing[0]
    assert any(line.startswith("failed") and "odd.xyz" in line and "unsupported" in line for line in listing)

    rc, out, _ = _cli(capsys, "unwatch", str(folder), *index)
    assert rc == 0 and "its documents stay" in out
    rc, out, _ = _cli(capsys, "docs", "list", "--json", *index)
    listed = json.loads(out)
    assert listed["watched"] == [] and len(listed["documents"]) == 4  # 3 indexed, 1 failed
    rc, _, err = _cli(capsys, "watch", *index)
    assert rc == 2 and err.startswith("error: collection 'notes' watches no folder yet")
    rc, _, err = _cli(capsys, "unwatch", str(folder), *index)
    assert rc == 1 and "not watched" in err
    rc, out, _ = _cli(capsys, "watch", str(folder), "--once", "--json", *index)  # remembered again, synced, exits
    assert rc == 0 and json.loads(out)["report"]["skipped"] == 3
