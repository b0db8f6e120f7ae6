"""The chunk KV cache's disk store (``localrag.backends.kv_store``): entries read back only as
written, the least recently used evicted under the size cap, and a writer killed mid-write leaving
nothing that is ever read. Real files, a real killed process.

Run: .venv/bin/python -m pytest tests/test_kv_store.py -q
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from localrag.backends.kv_store import _HEAD, KVStore

ROOT = Path(__file__).resolve().parents[1]


def test_an_entry_reads_back_as_written_and_another_key_misses(tmp_path):
    store = KVStore(tmp_path, max_bytes=1 << 20)
    assert store.put("a", b"alpha" * 100)
    assert store.get("a") == b"alpha" * 100
    assert store.get("b") is None
    assert (store.stats.hits, store.stats.misses) == (1, 1)


def test_a_full_cache_evicts_the_least_recently_used_and_stays_under_its_cap(tmp_path):
    entry = 1000
    cap = 3 * (_HEAD + entry) + 10  # room for three entries
    store = KVStore(tmp_path, max_bytes=cap)
    for key in "abc":
        assert store.put(key, key.encode() * entry)
    assert store.get("a") is not None  # a is now more recent than b
    assert store.put("d", b"d" * entry)
    assert store.size() <= cap and len(store.entries()) == 3
    assert store.get("b") is None  # the least recently used went
    assert [store.get(k) is not None for k in "acd"] == [True, True, True]
    for i in range(10):  # many more: still within the cap, the newest kept
        assert store.put(f"k{i}", bytes([i]) * entry)
        assert store.size() <= cap
    assert store.get("k9") == bytes([9]) * entry and store.stats.evictions == 11
    assert not store.put("huge", b"x" * cap)  # one entry over the cap is not kept, and evicts nothing
    assert len(store.entries()) == 3


def test_a_truncated_or_corrupted_or_misnamed_file_is_a_miss_and_is_deleted(tmp_path):
    store = KVStore(tmp_path, max_bytes=1 << 20)
    payload = bytes(range(256)) * 40
    for key in ("cut", "flip", "other"):
        store.put(key, payload)
    cut = store.path("cut")
    cut.write_bytes(cut.read_bytes()[:-100])  # a write that stopped short
    flip = store.path("flip")
    data = bytearray(flip.read_bytes())
    data[-5] ^= 1
    flip.write_bytes(bytes(data))
    store.path("misnamed").write_bytes(store.path("other").read_bytes())  # another key's entry
    assert store.get("cut") is None and store.get("flip") is None and store.get("misnamed") is None
    assert not cut.exists() and not flip.exists() and not store.path("misnamed").exists()
    assert store.stats.rejected == 3
    assert store.get("other") == payload


KILLED_WRITER = """
import os, sys, time
from pathlib import Path
from localrag.backends.kv_store import KVStore
def stall(fd):  # the data is written, not yet renamed into place: die here
    print("writing", flush=True)
    time.sleep(60)
os.fsync = stall
KVStore(Path(sys.argv[1]), 1 << 30).put("k", b"v" * (4 << 20))
"""


def test_a_writer_killed_mid_write_leaves_no_entry_that_is_ever_read(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(KILLED_WRITER), str(tmp_path)],
                            cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "writing"
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    leftovers = list(tmp_path.glob(".tmp-*"))
    assert len(leftovers) == 1 and leftovers[0].stat().st_size > 0  # killed with the data half-placed
    store = KVStore(tmp_path, max_bytes=1 << 30)
    assert store.get("k") is None and store.entries() == []
    old = time.time() - 7200
    os.utime(leftovers[0], (old, old))  # a later store sweeps what a dead writer left
    KVStore(tmp_path, max_bytes=1 << 30)
    assert list(tmp_path.glob(".tmp-*")) == []


def test_clear_deletes_every_entry(tmp_path):
    store = KVStore(tmp_path, max_bytes=1 << 20)
    store.put("a", b"1")
    store.put("b", b"2")
    assert store.clear() == 2 and store.entries() == [] and store.get("a") is None


def test_a_negative_cap_is_refused(tmp_path):
    with pytest.raises(ValueError, match="size cap"):
        KVStore(tmp_path, max_bytes=-1)


def test_the_hit_rate_counts_every_store_on_the_folder_and_the_cache_command_reports_it(tmp_path):
    """Lookups are counted on disk, so ``localrag cache`` reports the hit rate of every process that
    used the cache since it was last cleared, with the disk each chunk takes; ``--clear`` resets both."""
    import json

    folder = tmp_path / "cache" / "chunk-kv"
    one, two = KVStore(folder, max_bytes=1 << 20), KVStore(folder, max_bytes=1 << 20)
    one.put("a", b"a" * 1000)
    two.put("b", b"b" * 3000)
    assert one.get("a") and two.get("a") and two.get("b") and one.get("c") is None
    assert one.lookups() == two.lookups() == (3, 1)
    env = {**os.environ, "LOCALRAG_CACHE_DIR": str(tmp_path / "cache"), "HF_HUB_OFFLINE": "1"}

    def cache(*args):
        done = subprocess.run([sys.executable, "-m", "localrag", "cache", *args], capture_output=True, text=True,
                              env=env, cwd=ROOT, timeout=120)
        assert done.returncode == 0, done.stderr
        return done.stdout

    got = json.loads(cache("--json"))
    assert (got["entries"], got["hits"], got["misses"], got["hit_rate"]) == (2, 3, 1, 0.75)
    assert got["bytes_per_entry"] == (2 * _HEAD + 4000) // 2
    assert "hit rate since last cleared: 75% of 4 lookups" in cache()
    cache("--clear")
    assert json.loads(cache("--json"))["hits"] == 0 and one.lookups() == (0, 0) and not one.entries()
