"""Model registry: bundled names resolve offline; bad paths get one-line, specific errors."""

from __future__ import annotations

import subprocess
import sys

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
