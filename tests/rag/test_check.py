"""``python -m localrag check``: a clean index passes; each planted defect is found, named with its
file and chunk, and ``--repair`` fixes it. Real Chroma, real MiniLM, real files; the unreachable
node is cut out of Chroma's saved HNSW graph on disk, the damaged index is made by a real SIGKILL
inside Chroma's save (an LD_PRELOAD shim kills the process the moment it opens the id map for
writing).

Run: .venv/bin/python -m pytest tests/rag/test_check.py -q
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hnsw_files import cut_off, level0_only, persist_every_write, save_whole_graph
from rag_docgen import SMALL_CHUNKS, assert_consistent, prose, write

from localrag.rag.check import IndexCheck
from tests.conftest import require_or_skip

ROOT = Path(__file__).resolve().parents[2]
SHIM = Path(__file__).with_name("killat.c")

pytestmark = pytest.mark.slow


def _docs(root: Path, n: int = 6, words: int = 150) -> dict[Path, str]:
    """Files with one marker each, several chunks long; file -> its marker."""
    out = {}
    for i in range(n):
        marker = f"zq{i}mark"
        text = f"# Note {i}\n\nThe marker of note {i} is {marker}.\n\n" + prose(words, seed=i)
        out[write(root / f"note{i}.md", text)] = marker
    return out


@pytest.fixture
def indexed(tmp_path, make_index):
    docs = _docs(tmp_path / "docs")
    idx = make_index(**SMALL_CHUNKS)
    idx.ingest([tmp_path / "docs"])
    return idx, docs


def _check(idx, tmp_path, full=True):
    return IndexCheck(idx, uploads_dir=tmp_path / "data" / "uploads").run(full=full)


def _repair(idx, tmp_path, report, **kw):
    return IndexCheck(idx, uploads_dir=tmp_path / "data" / "uploads").repair(report, **kw)


def _all_found(idx, docs: dict[Path, str]) -> None:
    for path, marker in docs.items():
        [hit] = idx.search(marker, k=1)
        assert hit.file == str(path) and marker in hit.text


def test_a_clean_index_passes(indexed, tmp_path):
    idx, _ = indexed
    report = _check(idx, tmp_path)
    assert report.ok and report.problems == [], [p.line() for p in report.problems]
    assert report.files == 6 and report.chunks > 30 and report.swept == report.chunks


def test_a_vector_deleted_behind_our_back(indexed, tmp_path):
    idx, docs = indexed
    victim = sorted(idx.store.ids(idx.space))[3]
    with idx.store.session():
        idx.store.collection(idx.space).delete(ids=[victim])
    report = _check(idx, tmp_path)
    [p] = report.problems
    ver, seq = victim.split(":")
    assert p.kind == "missing-chunks" and p.chunk == f"{ver}:{seq}" and p.file in {str(d) for d in docs}
    after = _repair(idx, tmp_path, report)
    assert after.ok, [p.line() for p in after.problems]
    assert any("indexed 1 file(s) again" in line for line in after.repaired)
    assert_consistent(idx)
    _all_found(idx, docs)


def test_a_manifest_row_with_no_chunks(indexed, tmp_path):
    idx, docs = indexed
    extra = write(tmp_path / "docs" / "late.md", "# Late\n\nThe marker of the late note is zqlate.\n")
    db = sqlite3.connect(idx.dir / "manifest.sqlite")
    rec = idx.manifest.files("default")[0]
    with db:  # a row claiming three chunks of a version Chroma never saw
        db.execute("INSERT INTO files VALUES (?,?,?,?,?,?,?,?,?,?)",
                   ("default", str(extra), "0" * 64, extra.stat().st_size, "f" * 32, rec.space, rec.emb_fp,
                    rec.chunk_fp, 3, time.time()))
    db.close()
    report = _check(idx, tmp_path)
    [p] = [p for p in report.problems if p.kind != "changed"]
    assert (p.kind, p.file, p.chunk) == ("missing-chunks", str(extra), f"{'f' * 32}:0,1,2")
    assert "all its 3 chunks" in p.detail
    after = _repair(idx, tmp_path, report)
    assert after.ok, [p.line() for p in after.problems]
    assert_consistent(idx)
    _all_found(idx, {**docs, extra: "zqlate"})


def test_a_chroma_id_with_no_manifest_row(indexed, tmp_path):
    idx, docs = indexed
    vec = idx.embedder.embed(["a stray chunk nobody indexed"])
    with idx.store.session():
        idx.store.collection(idx.space).add(ids=["0badc0de:0"], embeddings=vec, documents=["a stray chunk"],
                                            metadatas=[{"ver": "0badc0de", "file": "/nowhere/stray.txt"}])
    report = _check(idx, tmp_path)
    [p] = report.problems
    assert (p.kind, p.chunk, p.file) == ("orphan-chunks", "0badc0de:0", "/nowhere/stray.txt")
    after = _repair(idx, tmp_path, report)
    assert after.ok and "0badc0de:0" not in idx.store.ids(idx.space)
    assert_consistent(idx)


def test_a_bm25_entry_missing(indexed, tmp_path):
    idx, docs = indexed
    pairs = idx._live_texts()
    gone = sorted(pairs)[0][0]
    idx._bm25_store().build([p for p in pairs if p[0] != gone], idx.manifest.generation("default"))
    report = _check(idx, tmp_path)
    [p] = report.problems
    assert (p.kind, p.chunk) == ("bm25", gone) and p.file
    after = _repair(idx, tmp_path, report)
    assert after.ok and gone in idx.bm25_ids()
    assert_consistent(idx)


def test_an_unreachable_node_cut_out_of_the_saved_graph(tmp_path, make_index):
    docs = _docs(tmp_path / "docs")
    idx = make_index(**SMALL_CHUNKS)
    persist_every_write(idx)  # the graph on disk is the whole graph
    idx.ingest([tmp_path / "docs"])
    save_whole_graph(idx)
    ids = sorted(idx.store.ids(idx.space))
    idx.close()  # the last user of the folder's Chroma client: the next one loads the graph from disk
    victim = level0_only(tmp_path / "index", ids)[7]
    cut_off(tmp_path / "index", victim)
    idx = make_index(**SMALL_CHUNKS)
    report = _check(idx, tmp_path)
    [p] = report.problems
    assert (p.kind, p.chunk) == ("unreachable", victim)
    assert p.file in {str(d) for d in docs}
    quick = _check(idx, tmp_path, full=False)  # the cheap check does not sweep
    assert quick.ok
    after = _repair(idx, tmp_path, report)
    assert after.ok, [p.line() for p in after.problems]
    assert any("re-added 1 vector" in line for line in after.repaired)
    assert_consistent(idx)


def test_changed_and_missing_files_stale_settings_and_orphan_uploads(indexed, tmp_path, make_index):
    idx, docs = indexed
    paths = sorted(docs)
    write(paths[0], "# Note 0\n\nThe marker of note 0 is zqnew0.\n")  # edited on disk
    paths[1].unlink()  # gone
    uploads = tmp_path / "data" / "uploads" / "default"
    orphan = write(uploads / "old.txt", "left over")
    os.utime(orphan, (time.time() - 3600, time.time() - 3600))
    fresh = write(uploads / "staging.txt", "about to be ingested")  # too young to be called an orphan
    report = _check(idx, tmp_path)
    found = {(p.kind, p.file) for p in report.problems}
    assert found == {("changed", str(paths[0])), ("missing-file", str(paths[1])), ("orphan-upload", str(orphan))}
    after = _repair(idx, tmp_path, report)
    assert {(p.kind, p.file) for p in after.problems} == {("missing-file", str(paths[1]))}  # kept unless asked
    assert not orphan.exists() and fresh.exists()
    [hit] = idx.search("zqnew0", k=1)
    assert hit.file == str(paths[0])
    after = _repair(idx, tmp_path, after, drop_missing=True)
    assert after.ok and str(paths[1]) not in {d.path for d in idx.list_documents()}
    other = make_index(chunk_tokens=48, overlap_tokens=8)  # other chunk settings than the index was built with
    report = _check(other, tmp_path)
    assert {p.kind for p in report.problems} == {"stale-model"} and len(report.problems) == 5
    assert _repair(other, tmp_path, report).ok
    assert_consistent(other)


def _cli(*args: str, env_extra: dict | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", **(env_extra or {}))
    return subprocess.run([sys.executable, "-m", "localrag", *args], capture_output=True, text=True, cwd=ROOT,
                          env=env, timeout=300)


def test_cli_exit_codes_and_json(tmp_path):
    docs = _docs(tmp_path / "docs", 3)
    index_dir, data_dir = tmp_path / "index", tmp_path / "data"
    assert _cli("ingest", str(tmp_path / "docs"), "--index-dir", str(index_dir)).returncode == 0
    out = _cli("check", "--index-dir", str(index_dir), "--data-dir", str(data_dir), "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["ok"] is True
    victim = next(iter(docs))
    victim.unlink()
    out = _cli("check", "--index-dir", str(index_dir), "--data-dir", str(data_dir))
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert f"problem  missing-file: {victim}: " in out.stdout and "check --repair" in out.stderr
    out = _cli("check", "--index-dir", str(index_dir), "--data-dir", str(data_dir), "--repair", "--drop-missing")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "repaired dropped 1 document(s)" in out.stdout and "after repair: clean: 2 files" in out.stdout


@pytest.fixture(scope="module")
def kill_shim(tmp_path_factory) -> Path:
    """The LD_PRELOAD shim that SIGKILLs a process when it opens a named file for writing."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        require_or_skip("no C compiler (cc or gcc) to build the kill shim")
    out = tmp_path_factory.mktemp("shim") / "killat.so"
    subprocess.run([cc, "-shared", "-fPIC", "-O2", "-o", str(out), str(SHIM), "-ldl"], check=True)
    return out


def test_a_damaged_index_after_a_kill_inside_chromas_save(tmp_path, make_index, kill_shim):
    """The kill lands after Chroma saved the graph of a delete and before it saved the id map: every
    later process's first use fails to replay the log (the damage Chroma 1.5.9 leaves), which check
    reports; the repair rebuilds the space from the texts and the index is whole again."""
    docs = _docs(tmp_path / "docs", words=800)  # a few 200-token chunks per file
    idx = make_index()
    persist_every_write(idx)  # a save after every write, so the delete below is saved at once
    idx.ingest([tmp_path / "docs"])
    idx.close()
    victim = sorted(docs)[2]
    out = _cli("docs", "remove", str(victim), "--index-dir", str(tmp_path / "index"),
               env_extra={"LD_PRELOAD": str(kill_shim), "KILL_AT_OPEN": "index_metadata.pickle"})
    assert out.returncode == -9, out.stderr
    idx = make_index()
    report = _check(idx, tmp_path)
    kinds = report.kinds()
    assert "damaged" in kinds and "Failed to apply logs to the hnsw segment writer" in report.problems[0].detail
    assert "unfinished" in kinds  # the removal's garbage row: the delete is still owed
    after = _repair(idx, tmp_path, report)
    assert after.ok, [p.line() for p in after.problems]
    assert any(line.startswith("rebuilt the damaged vector index") for line in after.repaired)
    assert_consistent(idx)
    del docs[victim]
    _all_found(idx, docs)
    idx.close()
    out = _cli("check", "--index-dir", str(tmp_path / "index"), "--data-dir", str(tmp_path / "data"))
    assert out.returncode == 0, out.stdout + out.stderr  # a fresh process replays the log without error


def test_the_app_warns_at_start_when_the_index_needs_attention(tmp_path, indexed):
    from localrag.app.config import AppConfig
    from localrag.app.services import Services
    from localrag.rag.config import IndexConfig

    idx, docs = indexed
    services = Services(AppConfig(index=IndexConfig(index_dir=tmp_path / "index"), data_dir=tmp_path / "data"),
                        index_factory=lambda name: idx)
    try:
        assert services.check_index() == "" and "attention" not in services.model_status()
        sorted(docs)[0].unlink()
        warning = services.check_index()
        assert "needs attention (default: 1 problem: 1 missing-file)" in warning
        assert "python -m localrag check --repair" in warning and "\n" not in warning
        assert warning in services.model_status()
    finally:
        services.history.close()
