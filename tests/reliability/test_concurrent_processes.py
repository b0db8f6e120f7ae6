"""Two writers and one long-lived reader on one index folder, as the app and two CLI ingests
would be. The writers run at once (the second says it waits for the first); the reader
searches all along and never sees a chunk that is not committed, finds every writer's files
through the dense ranking as soon as they are committed, and then writes itself. A fresh
process finally reads the same index. Ends with the three-way consistency check.

Run: .venv/bin/python -m pytest tests/reliability/test_concurrent_processes.py -q
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import zlib
from pathlib import Path

import pytest
from harness import ROOT, child_env
from rag_docgen import assert_consistent, prose, write

from localrag.rag.config import IndexConfig
from localrag.rag.index import DocumentIndex

pytestmark = [pytest.mark.slow, pytest.mark.reliability]

FACTS = [
    ("Owls can rotate their heads about 270 degrees.", "how far does an owl turn its head"),
    ("Honey never spoils if it is sealed well.", "does honey go bad"),
    ("Octopuses have three hearts and blue blood.", "how many hearts does an octopus have"),
    ("Bamboo can grow nearly a metre in one day.", "how fast does bamboo grow"),
    ("Venus spins backwards compared with most planets.", "which planet rotates in reverse"),
    ("Sharks existed before trees appeared on land.", "were sharks older than trees"),
    ("Bananas are berries but strawberries are not.", "is a banana a berry"),
    ("Lightning is about five times hotter than the sun's surface.", "how hot is a lightning bolt"),
    ("Sloths can hold their breath longer than dolphins.", "how long can a sloth hold its breath"),
    ("The Eiffel Tower grows taller in summer heat.", "does the eiffel tower change height"),
    ("Wombats produce cube-shaped droppings.", "what shape are wombat droppings"),
    ("A day on Mercury lasts longer than its year.", "how long is a day on mercury"),
]


def _folder(root: Path, facts: list[tuple[str, str]], tag: str) -> dict[Path, str]:
    """One file per fact (with filler prose so files have several chunks); file -> its query.
    The filler is the same in every run (``hash`` of a str differs from process to process, and
    with some fillers another file's first chunk outranked a fact's own by 1% for the small
    embedder: a retrieval near-tie, not the consistency this test is about)."""
    files = {}
    for i, (fact, query) in enumerate(facts):
        path = write(root / f"{tag}{i}.md", f"# {tag} {i}\n\n{fact}\n\n" + prose(400, seed=zlib.crc32(f"{tag}{i}".encode())))
        files[path] = query
    return files


def _ingest_cli(index_dir: Path, folder: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "localrag", "ingest", str(folder), "--index-dir", str(index_dir), "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=child_env(),
    )  # fmt: skip


def test_two_writers_and_a_long_lived_reader(tmp_path, embedder):
    index_dir = tmp_path / "index"
    seed = write(tmp_path / "seed.md", "# Seed\n\nThe lighthouse keeper trims the wick at dusk.\n")
    reader = DocumentIndex(IndexConfig(index_dir=index_dir), embedder=embedder)
    reader.ingest([seed])
    assert reader.search("lighthouse keeper", k=1)[0].file == str(seed)  # its graph is loaded

    a = _folder(tmp_path / "A", FACTS[:5], "a")
    b = _folder(tmp_path / "B", FACTS[5:10], "b")
    writers = [_ingest_cli(index_dir, tmp_path / "A"), _ingest_cli(index_dir, tmp_path / "B")]
    found: set[Path] = set()
    searches = 0
    while any(w.poll() is None for w in writers) or searches == 0:
        for path, query in {**a, **b}.items():
            live = set(reader.manifest.live_versions("default", reader.space))
            dense, lexical = reader.rank(query, 5)
            searches += 1
            for cid, _ in dense + lexical:
                # A chunk of a version committed after `live` was read is fine; never an uncommitted one.
                ver = cid.split(":", 1)[0]
                assert ver in live or ver in reader.manifest.live_versions("default", reader.space)
            rec = reader.manifest.get("default", str(path))
            if rec is not None and dense and dense[0][0].startswith(rec.ver + ":"):
                found.add(path)
        time.sleep(0.2)
    outs = [w.communicate(timeout=300) for w in writers]
    for w, (out, err) in zip(writers, outs, strict=True):
        assert w.returncode == 0 and "Traceback" not in err, err
        assert json.loads(out)["added"] == 5
    assert any("waiting: another process (pid" in err for _, err in outs), "the second writer said nothing"
    assert searches > 10

    # Once committed, every writer's file is the reader's top dense hit for its question.
    for path, query in {**a, **b}.items():
        rec = reader.manifest.get("default", str(path))
        dense, _ = reader.rank(query, 3)
        assert dense[0][0].startswith(rec.ver + ":"), (path.name, query)

    # The long-lived reader writes too, after the others; then a fresh process reads everything.
    c = _folder(tmp_path / "C", FACTS[10:], "c")
    assert reader.ingest([tmp_path / "C"]).added == 2
    assert_consistent(reader)
    for path, query in [*list(a.items())[:2], *list(b.items())[:2], *c.items()]:
        out = subprocess.run(
            [sys.executable, "-m", "localrag", "search", query, "--k", "1", "--json", "--index-dir", str(index_dir)],
            capture_output=True, text=True, cwd=ROOT, env=child_env(), timeout=300,
        )  # fmt: skip
        [hit] = json.loads(out.stdout)
        assert hit["file"] == str(path) and hit["dense_score"] is not None, (path.name, hit)
    reader.close()
