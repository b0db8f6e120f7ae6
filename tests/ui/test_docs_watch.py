"""The Documents tab on the real index (Chroma + the ONNX MiniLM in a temp folder; the answer model
is a fake, no chat here): ingest progress with files, chunks/s and an ETA, the wait for another
writer's lock, and folders kept in sync (watch, restart, stop watching).
"""

from __future__ import annotations

import os
import re
import threading
import time
from pathlib import Path

import pytest

from localrag.app.config import AppConfig
from localrag.app.services import Services
from localrag.rag.config import IndexConfig
from localrag.rag.index import DocumentIndex
from localrag.ui.documents import DocsController
from tests.ui.conftest import FAKE_MODES, FakeEngine

PROGRESS = re.compile(r"^Ingesting: (\d+)/(\d+) files · \d+ chunks · \d+\.\d chunks/s · ETA (\d+:\d\d|\?)$")


@pytest.fixture
def make_real_services(tmp_path):
    made: list[Services] = []

    def make(**config) -> Services:
        cfg = AppConfig(data_dir=tmp_path / "data", index=IndexConfig(index_dir=tmp_path / "index"), **config)
        s = Services(cfg, engine=FakeEngine(), modes=FAKE_MODES)
        made.append(s)
        return s

    yield make
    for s in made:
        s.close()


def until(condition, timeout: float = 5.0):
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() > deadline:
            pytest.fail(f"not within {timeout} s")
        time.sleep(0.05)
    return value


def names(rows: list[list]) -> dict[str, str]:
    """Document list rows -> {file name: status}."""
    return {Path(r[0]).name: r[2] for r in rows}


def test_ingest_shows_files_chunks_per_second_eta_and_the_wait_for_the_write_lock(make_real_services, tmp_path):
    s = make_real_services()
    docs = DocsController(s)
    upload = tmp_path / "browser"
    for i in range(3):
        (upload / f"n{i}.md").parent.mkdir(exist_ok=True)
        (upload / f"n{i}.md").write_text(f"# Note {i}\n\nThe {i}th falcon nests on the copper ridge.\n")
    other = DocumentIndex(IndexConfig(index_dir=tmp_path / "index"), embedder=s.index("default").embedder)
    views = []
    with other.write_lock():  # another writer holds the index
        worker = threading.Thread(target=lambda: views.extend(docs.ingest(sorted(upload.iterdir()), "default")))
        worker.start()
        waiting = until(lambda: next((v for v in views if "Waiting" in v.summary), None), timeout=60)
        assert waiting.summary.startswith("⏳ Waiting for the write lock: ") and f"pid {os.getpid()}" in waiting.summary
        assert worker.is_alive()
    worker.join(120)
    other.close()
    progress = [PROGRESS.match(v.summary) for v in views if v.summary.startswith("Ingesting")]
    assert progress and all(progress), [v.summary for v in views]
    assert progress[-1].group(1, 2) == ("3", "3")
    assert views[-1].done and "3 added" in views[-1].summary


def test_a_watched_folder_follows_changes_survives_a_restart_and_stops_on_request(make_real_services, tmp_path):
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "a.md").write_text("# Alpha\n\nThe falcon nests on the copper ridge.\n")
    first = make_real_services()
    docs = DocsController(first)
    assert docs.watch_folder("work", "") == "Type the path of a folder on this machine first."
    assert docs.watch_folder("work", str(tmp_path / "nowhere")).startswith("❌ Cannot watch")
    note = docs.watch_folder("work", str(folder))
    assert note.startswith("👁 Keeping") and str(folder) in note
    until(lambda: names(docs.documents("work")) == {"a.md": "indexed"}, timeout=60)
    [row] = until(lambda: [r for r in docs.watched("work") if r[1] == "watching" and r[4] != "never"])
    assert row[:4] == [str(folder), "watching", 1, ""]
    assert docs.watched_choices("work") == [str(folder)] and "work" in docs.collections()

    (folder / "b.xyz").write_text("not a format we read")
    (folder / "c.md").write_text("# Gamma\n\nGlaciers carve the canyon.\n")
    until(lambda: names(docs.documents("work")).get("c.md") == "indexed")
    [row] = until(lambda: [r for r in docs.watched("work") if r[3]])
    assert row[2] == 2 and row[3].startswith("b.xyz: unsupported file type")
    until(lambda: first.watch_syncs() >= 2)  # the page refreshes its document list when this moves

    first.close()  # the app stops; a change made meanwhile is caught when it starts again
    (folder / "c.md").unlink()
    second = make_real_services()
    assert second.start_watching() == 1
    docs = DocsController(second)
    until(lambda: "c.md" not in names(docs.documents("work")), timeout=60)
    until(lambda: docs.watched("work")[0][1] == "watching")

    assert docs.unwatch_folder("work", "") == "Pick a watched folder first."
    assert docs.unwatch_folder("work", str(folder)).endswith("its documents stay in the collection.")
    assert docs.watched("work") == [] and names(docs.documents("work")) == {"a.md": "indexed"}
    assert [Path(f).name for f, _ in docs.failed("work")] == ["b.xyz"]  # failed files are listed apart
    (folder / "d.md").write_text("# Delta\n\nNot followed any more.\n")
    time.sleep(1.5)
    assert "d.md" not in names(docs.documents("work"))
    docs.watch_folder("work", str(folder))
    until(lambda: "d.md" in names(docs.documents("work")), timeout=30)
    assert docs.unwatch_folder("work", str(folder), delete=True) == f"Stopped watching `{folder}`; removed its 2 document(s)."  # a.md, d.md (and the failure entry of b.xyz)
    assert docs.documents("work") == []


@pytest.mark.parametrize("config", [{"host": "0.0.0.0"}, {"share": True}])
def test_watching_by_path_is_refused_when_others_can_reach_the_page(make_real_services, tmp_path, config):
    docs = DocsController(make_real_services(**config))
    note = docs.watch_folder("default", str(tmp_path))
    assert note.startswith("❌ Watching a folder by its path is offered only") and "python -m localrag watch" in note
    assert docs.watched("default") == []
