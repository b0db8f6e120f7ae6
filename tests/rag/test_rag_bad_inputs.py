"""Bad input: each case gives a clear per-file error while every other file is still ingested.

One folder holds all the bad cases next to good files and is ingested once
(module fixture); each case is its own test. The unreadable file needs a real
permission failure: tests usually run as root, for whom ``chmod 000`` blocks
nothing, so that ingest runs with root's permission-override capabilities
(CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH) dropped, which makes the kernel refuse the
read for real.

Run: .venv/bin/python -m pytest tests/rag/test_rag_bad_inputs.py -q
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path

import pytest
from rag_docgen import make_encrypted_pdf, make_pdf, prose, write

from localrag.rag.config import IndexConfig
from localrag.rag.index import DocumentIndex

UNICODE_NAME = "my notes — ünïcødé 文件 (v2).md"


@pytest.fixture(scope="module")
def bad_run(tmp_path_factory, embedder):
    root = tmp_path_factory.mktemp("bad")
    docs = root / "docs"
    write(docs / "good.md", "# Good\n\nThe lighthouse keeper trims the wick at dusk.\n")
    write(docs / UNICODE_NAME, "# Ünïcødé\n\nThe quokka smiles at every visitor.\n")
    make_pdf(docs / "fine.pdf", ["The glacier advanced ten metres last winter."])
    good_pdf = make_pdf(root / "src.pdf", ["a valid pdf that will be damaged " * 3])
    data = good_pdf.read_bytes()
    (docs / "corrupt.pdf").write_bytes(data[:9] + bytes(reversed(data[9:])))
    make_encrypted_pdf(docs / "encrypted.pdf", "classified launch codes")
    (docs / "empty.txt").write_bytes(b"")
    (docs / "binary.txt").write_bytes(bytes(range(256)) * 64)
    write(docs / "data.xyz", "some data in an unknown format\n")
    os.symlink(docs / "gone.md", docs / "broken-link.md")
    idx = DocumentIndex(IndexConfig(index_dir=root / "index"), embedder=embedder)
    report = idx.ingest([docs])
    yield idx, report, docs
    idx.close()


def _reason(report, name: str) -> str:
    [reason] = [r for p, r in report.failed if Path(p).name == name]
    return reason


def test_good_files_still_ingested(bad_run):
    idx, report, docs = bad_run
    assert report.added == 3 and report.seen == 9
    assert {Path(d.path).name for d in idx.list_documents() if d.status == "indexed"} == {
        "good.md",
        UNICODE_NAME,
        "fine.pdf",
    }
    assert idx.search("lighthouse wick", k=1)[0].file == str(docs / "good.md")


def test_corrupt_pdf(bad_run):
    assert _reason(bad_run[1], "corrupt.pdf").startswith("corrupt PDF")


def test_encrypted_pdf(bad_run):
    assert _reason(bad_run[1], "encrypted.pdf") == "encrypted PDF: a password is required"


def test_empty_file(bad_run):
    assert _reason(bad_run[1], "empty.txt") == "empty file"


def test_binary_named_txt(bad_run):
    assert _reason(bad_run[1], "binary.txt").startswith("binary content")


def test_unknown_extension(bad_run):
    assert _reason(bad_run[1], "data.xyz").startswith("unsupported file type '.xyz'")


def test_broken_symlink(bad_run):
    assert _reason(bad_run[1], "broken-link.md").startswith("broken symlink")


def test_failures_are_listed_with_status(bad_run):
    docs = {Path(d.path).name: d for d in bad_run[0].list_documents()}
    assert docs["encrypted.pdf"].status == "failed" and "password" in docs["encrypted.pdf"].reason


def test_names_with_spaces_and_unicode(bad_run):
    idx, _, docs = bad_run
    hit = idx.search("quokka smiles", k=1)[0]
    assert hit.file == str(docs / UNICODE_NAME)
    assert hit.citation().startswith(UNICODE_NAME)
    assert hit.heading_path == ("Ünïcødé",)


def test_unreadable_file():
    """A file the process may not read (real EACCES, see the module docstring)."""
    base = Path(tempfile.mkdtemp(prefix="localrag-perm-"))
    try:
        os.chmod(base, 0o777)
        docs = base / "docs"
        docs.mkdir()
        os.chmod(docs, 0o777)
        write(docs / "readable.md", "Otters hold hands while sleeping.\n")
        secret = write(docs / "secret.md", "nobody may read this\n")
        os.chmod(secret, 0o000)
        # As root, drop only the capabilities that bypass file permissions (DAC override), so the
        # kernel really refuses the read while root's own files (the checkout, .venv) stay readable.
        with _without_dac_override():
            with pytest.raises(PermissionError):
                secret.read_bytes()  # the premise: this process really cannot read it
            idx = DocumentIndex(IndexConfig(index_dir=base / "index"))
            report = idx.ingest([docs])
            idx.close()
        assert report.added == 1
        assert _reason(report, "secret.md").startswith("unreadable: permission denied")
    finally:
        shutil.rmtree(base, ignore_errors=True)


@contextlib.contextmanager
def _without_dac_override():
    """Clear CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH from the effective set (capget/capset), then restore.

    A no-op for a non-root user, who is refused by the mode bits anyway."""
    if os.geteuid() != 0:
        yield
        return

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]

    libc = ctypes.CDLL(None, use_errno=True)
    header, data = Header(0x20080522, 0), (Data * 2)()  # _LINUX_CAPABILITY_VERSION_3: two 32-bit words
    assert libc.capget(ctypes.byref(header), data) == 0
    saved = data[0].effective
    data[0].effective &= ~((1 << 1) | (1 << 2))  # CAP_DAC_OVERRIDE = 1, CAP_DAC_READ_SEARCH = 2
    assert libc.capset(ctypes.byref(header), data) == 0, os.strerror(ctypes.get_errno())
    try:
        yield
    finally:
        data[0].effective = saved
        assert libc.capset(ctypes.byref(header), data) == 0


def _write_50mb(path: Path, mb: int = 50, sentinel: bool = True) -> int:
    """A 50 MB fixed-width text export: 2,000-byte space-padded records (97 distinct ones, cycled),
    then one unique sentence. Every byte goes through the streaming reader and the tokenizer;
    the padding keeps the chunk count (~2k) small enough for a test on two cores."""
    records = [prose(14, seed=100 + i).replace("\n", " ") for i in range(97)]
    records = [" ".join(f"{w:<150}" for w in r.split(" ")[:13]).ljust(1999) + "\n" for r in records]
    size, n = 0, 0
    with open(path, "w", encoding="utf-8") as fh:
        while size < mb * 1024 * 1024:
            fh.write(records[n % len(records)])
            size += len(records[0])
            n += 1
        if sentinel:
            fh.write("The final sentinel phrase is ultramarine pangolin.\n")
    return size


def _rss() -> int:
    """Anonymous resident memory (heap, stacks); file-backed pages are the OS's cache of files."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no RssAnon in /proc/self/status")


class _RssSampler(threading.Thread):
    """Samples this process's anonymous resident memory (Python, torch, Chroma's Rust core alike)."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.samples: list[tuple[float, int]] = [(time.monotonic(), _rss())]
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.02):
            self.samples.append((time.monotonic(), _rss()))

    def peak_between(self, t0: float, t1: float) -> int:
        return max(r for t, r in self.samples if t0 <= t <= t1)


@pytest.mark.slow
def test_50mb_text_file_bounded_memory(tmp_path, embedder):
    """Streamed end to end: read line by line -> chunk -> embed -> Chroma in batches of 256 chunks.

    Peak resident-memory growth while the file streams through must stay well below the
    file size: reading the file into memory would alone exceed the bound. The BM25 rebuild
    that follows is over the whole collection (a derived index), so it is reported, not bounded.
    The model and Chroma are warmed up first so one-off loading is not counted.
    Repeated chunks of one file are stored once.
    """
    big = tmp_path / "big export.txt"
    size = _write_50mb(big)
    with open(big, encoding="utf-8") as fh:
        lines = sum(1 for _ in fh)
    idx = DocumentIndex(IndexConfig(index_dir=tmp_path / "index"), embedder=embedder)
    # Warm-up on 10 MB of the same records: model buffers, full batches, Chroma's caches.
    warm = tmp_path / "warm"
    warm.mkdir()
    _write_50mb(warm / "warm.txt", mb=10, sentinel=False)
    idx.ingest([warm])
    marks: dict[str, float] = {}
    sampler = _RssSampler()
    sampler.start()
    try:
        report = idx.ingest([big], progress=lambda e: marks.setdefault(e.kind, time.monotonic()))
    finally:
        sampler.stop.set()
        sampler.join()
    base = sampler.samples[0][1]
    stream = sampler.peak_between(marks["file_start"], marks["file_done"]) - base
    total = max(r for _, r in sampler.samples) - base
    print(
        f"50MB ingest: {report.summary()}; peak RSS growth while streaming the file "
        f"{stream / 2**20:.0f} MiB, including the BM25 rebuild {total / 2**20:.0f} MiB"
    )
    assert report.failed == [] and report.added == 1 and report.bytes >= size
    # Every record went through the tokenizer; the chunk texts repeat, and a file stores each once.
    assert 50 < report.chunks < 1000
    # Reading the file into memory would alone exceed this; what grows is Chroma's own index.
    assert stream < 0.6 * size, f"RSS grew {stream / 2**20:.0f} MiB for a {size / 2**20:.0f} MiB file"
    # Its rare words put the last chunk at BM25 rank 1; the near-identical records of the warm-up
    # file can tie it in fusion, so look in the top 3.
    hits = [h for h in idx.search("final sentinel ultramarine pangolin", k=3) if h.file == str(big)]
    assert hits and hits[0].line_end == lines and "ultramarine pangolin" in hits[0].text
    idx.close()
