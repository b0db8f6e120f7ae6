"""Chunk KV cache on disk: one file per entry, a size cap evicting the least recently used.

An entry is opaque bytes (a KV sequence saved by ``llama_state_seq_get_data``) under a string key
that names everything the bytes depend on (``localrag.backends.chunk_reuse.entry_key``: model,
kernels, prompt prefix, chunk, its text). A changed input is another key, so a stale entry is never
read; it only waits for eviction.

File layout: MAGIC, sha256(key), payload length (u64 little-endian), sha256(payload), payload.
Writes go to a temporary file in the same folder, are fsynced, then renamed over the entry's name
(atomic on POSIX): a process killed mid-write leaves a ``.tmp-*`` file that is never read (and is
removed by the next store opened on the folder once it is an hour old). A file that does not check
out (truncated, another key, corrupted) is a miss and is deleted. Recency is the file's mtime,
touched on every hit. Every lookup (``get``) appends one byte to ``lookups.log`` (h: a hit, m: a
miss; appends of one byte from several processes do not interleave), so ``lookups`` gives the hit
rate since the cache was last cleared.

    store = KVStore(Path("~/.cache/localrag/chunk-kv").expanduser(), max_bytes=2 << 30)
    store.put("key", b"...")
    store.get("key")       # b"..." or None
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import struct
import time
from dataclasses import dataclass
from pathlib import Path

MAGIC = b"LRKVC\x001\n"
_HEAD = len(MAGIC) + 32 + 8 + 32
SUFFIX = ".kv"
LOOKUPS = "lookups.log"
STALE_TMP_S = 3600.0


@dataclass
class StoreStats:
    hits: int = 0
    misses: int = 0
    writes: int = 0
    evictions: int = 0
    rejected: int = 0  # files found broken (truncated, corrupted) and deleted


class KVStore:
    """A folder of entries within ``max_bytes`` (headers included)."""

    def __init__(self, folder: Path, max_bytes: int) -> None:
        if max_bytes < 0:
            raise ValueError(f"the chunk cache's size cap must be >= 0 bytes, not {max_bytes}")
        self.folder = Path(folder)
        self.max_bytes = max_bytes
        self.stats = StoreStats()
        self._last_ns = 0
        self._sweep_tmp()

    def _touch(self, path: Path) -> None:
        """Mark ``path`` most recently used (strictly later than every entry this store touched)."""
        self._last_ns = max(time.time_ns(), self._last_ns + 1000)
        with contextlib.suppress(OSError):
            os.utime(path, ns=(self._last_ns, self._last_ns))

    @staticmethod
    def key_digest(key: str) -> bytes:
        return hashlib.sha256(key.encode("utf-8")).digest()

    def path(self, key: str) -> Path:
        return self.folder / (self.key_digest(key).hex()[:40] + SUFFIX)

    def has(self, key: str) -> bool:
        """Whether an entry is stored under ``key`` (not read: ``get`` checks it)."""
        return self.path(key).is_file()

    def get(self, key: str) -> bytes | None:
        path = self.path(key)
        try:
            data = path.read_bytes()
        except OSError:
            self._count(False)
            return None
        payload = self._check(data, key)
        if payload is None:
            self.stats.rejected += 1
            self._count(False)
            with contextlib.suppress(OSError):
                path.unlink()
            return None
        self._touch(path)
        self._count(True)
        return payload

    def _count(self, hit: bool) -> None:
        if hit:
            self.stats.hits += 1
        else:
            self.stats.misses += 1
        with contextlib.suppress(OSError):  # a statistic: a read-only or missing folder loses it
            fd = os.open(self.folder / LOOKUPS, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, b"h" if hit else b"m")
            finally:
                os.close(fd)

    def lookups(self) -> tuple[int, int]:
        """(hits, misses) of every process's lookups since the cache was last cleared."""
        try:
            data = (self.folder / LOOKUPS).read_bytes()
        except OSError:
            return 0, 0
        return data.count(b"h"), data.count(b"m")

    @staticmethod
    def _check(data: bytes, key: str) -> bytes | None:
        """The payload of a well-formed entry for ``key``; None for anything else."""
        if len(data) < _HEAD or not data.startswith(MAGIC):
            return None
        at = len(MAGIC)
        if data[at:at + 32] != KVStore.key_digest(key):
            return None
        (n,) = struct.unpack("<Q", data[at + 32:at + 40])
        payload = data[_HEAD:]
        if len(payload) != n or hashlib.sha256(payload).digest() != data[at + 40:_HEAD]:
            return None
        return payload

    def put(self, key: str, payload: bytes) -> bool:
        """Store ``payload`` under ``key`` and evict down to the cap; False when one entry alone
        would exceed the cap (nothing is stored)."""
        size = _HEAD + len(payload)
        if size > self.max_bytes:
            return False
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.path(key)
        tmp = self.folder / f".tmp-{os.getpid()}-{time.monotonic_ns()}"
        head = MAGIC + self.key_digest(key) + struct.pack("<Q", len(payload)) + hashlib.sha256(payload).digest()
        try:
            with open(tmp, "wb") as f:
                f.write(head)
                f.write(payload)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
            self._touch(path)
        finally:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
        with contextlib.suppress(OSError):  # the rename itself reaches the disk
            fd = os.open(self.folder, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        self.stats.writes += 1
        self.evict(keep=path)
        return True

    def entries(self) -> list[tuple[Path, int, float]]:
        """(path, size, last used) of every entry, least recently used first."""
        out = []
        for p in self.folder.glob("*" + SUFFIX) if self.folder.is_dir() else ():
            with contextlib.suppress(OSError):
                st = p.stat()
                out.append((p, st.st_size, st.st_mtime))
        return sorted(out, key=lambda e: (e[2], e[0].name))

    def size(self) -> int:
        return sum(s for _, s, _ in self.entries())

    def evict(self, keep: Path | None = None) -> None:
        """Delete the least recently used entries until the folder is within the cap."""
        entries = self.entries()
        total = sum(s for _, s, _ in entries)
        for p, s, _ in entries:
            if total <= self.max_bytes:
                break
            if p == keep:
                continue
            with contextlib.suppress(FileNotFoundError):
                p.unlink()
            total -= s
            self.stats.evictions += 1

    def clear(self) -> int:
        """Delete every entry (and temporary file); how many entries there were."""
        entries = self.entries()
        for p in [e[0] for e in entries] + [self.folder / LOOKUPS]:
            with contextlib.suppress(FileNotFoundError):
                p.unlink()
        self._sweep_tmp(max_age=0.0)
        return len(entries)

    def _sweep_tmp(self, max_age: float = STALE_TMP_S) -> None:
        """Remove temporary files left by writers that died (older than ``max_age`` seconds)."""
        if not self.folder.is_dir():
            return
        now = time.time()
        for p in self.folder.glob(".tmp-*"):
            with contextlib.suppress(OSError):
                if now - p.stat().st_mtime >= max_age:
                    p.unlink()
