"""Model registry: bundled names resolve offline; bad paths get one-line, specific errors."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest

from localrag.models import BUNDLED, ModelError, inspect_gguf, list_models, resolve


def test_bundled_models_resolve_and_inspect():
    info = {i.name: i for i in list_models() if not isinstance(i, ModelError)}
    assert set(BUNDLED) <= set(info)
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
