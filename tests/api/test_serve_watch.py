"""``python -m localrag serve`` follows the folders the collections watch: a sync at start catches
what changed while it was down, changes while it runs show within seconds, and it stops its
watcher at exit (SIGTERM) without a traceback.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from localrag.rag import DocumentIndex, IndexConfig
from localrag.rag.manifest import Manifest
from tests.api.conftest import Server

pytestmark = pytest.mark.slow


def indexed(tmp: Path) -> set[str]:
    manifest = Manifest(tmp / "index" / "manifest.sqlite")
    try:
        return {Path(r.path).name for r in manifest.files("notes")}
    finally:
        manifest.close()


def until(condition, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"not within {timeout} s")
        time.sleep(0.1)


def test_serve_syncs_watched_folders_at_start_and_follows_them_until_exit(tmp_path):
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "a.md").write_text("# Alpha\n\nThe falcon nests on the copper ridge.\n")
    index = DocumentIndex(IndexConfig(index_dir=tmp_path / "index", collection="notes"))
    index.watch(folder)  # remembered (as `python -m localrag watch` does), never synced yet
    index.close()
    (folder / "b.md").write_text("# Beta\n\nGlaciers carve the canyon.\n")  # changed while nothing ran

    server = Server(tmp_path).start()
    try:
        until(lambda: indexed(tmp_path) == {"a.md", "b.md"}, timeout=120)  # the sync at start
        (folder / "c.md").write_text("# Gamma\n\nLanterns of violet glass light the path.\n")
        (folder / "a.md").unlink()
        until(lambda: indexed(tmp_path) == {"b.md", "c.md"}, timeout=5)
    finally:
        server.stop()
    log = server.log.read_text()
    assert server.proc.returncode == 0, log[-3000:]
    assert "following 1 watched folder(s)" in log and "Traceback" not in log
