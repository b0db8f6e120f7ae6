"""The answerability judge: does the answer model, having read the prompt, hold an answer in it?

Read from the model itself (Lavi et al., arXiv 2509.22449: a linear "unanswerability direction" in
the middle layers): the hidden state of the last token of the judge's prompt at one layer
(``ModelConfig.hidden_layers``, ``localrag.backends.hidden``) goes through a logistic probe fitted on
SQuAD v2's calibration half (``bench judge``):

    p(answerable) = sigmoid(w . (h - mean) / scale + b)

The judge's prompt is the answer's with only its top chunk (``LAYOUT``): the instructions, source
[1], the question. A follow-up is not judged (the probe was fitted on questions alone, and a
follow-up's top chunk is often the previous question's). It shares the answer prompt's cells up to the end of that chunk, so it is
read aside after them at the cost of the question's tokens (``Backend.hidden_states_after``), and
it separated answerable from not a little better than the whole five-chunk prompt on the same
questions (docs/benchmarks.md, "The answerability judge").

A probe is a small JSON file in ``localrag/judge/probes/``, valid only for the model file it was
fitted on (its sha256) and the prompt it was fitted with (``prompt_key``: the layout and the
instructions): the hidden state depends on both. A model or prompt without one gets no probe, and
every answer says that its judge was the evidence check alone (``Judgement.judge``).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from localrag.config import default_cache_dir
from localrag.results import Judgement

PROBES_DIR = Path(__file__).parent / "probes"  # the shipped probes; LOCALRAG_PROBES_DIR: another folder
FINAL_NORM = -1  # the layer number that names the final norm's output
EVIDENCE_ONLY = "evidence check only"
LAYOUT = "judge prompt: the instructions, the top chunk as source [1], the question"


@dataclass(frozen=True)
class Probe:
    """A logistic probe on one layer's hidden state, for one model file and one prompt.
    ``refuse_below``: p(answerable) under which the answer is refused before it is written (fitted
    to refuse at most ``MAX_EARLY_FALSE_REFUSALS`` of the calibration half's answerable questions)."""

    model_sha256: str
    model_bytes: int
    prompt_sha256: str
    layer: int
    mean: tuple[float, ...]
    scale: tuple[float, ...]
    weights: tuple[float, ...]
    bias: float
    refuse_below: float
    fitted: dict = field(default_factory=dict)  # provenance: data, sizes, cross-validated AUROC

    def p_answerable(self, hidden: np.ndarray) -> float:
        z = (np.asarray(hidden, dtype=np.float64) - np.asarray(self.mean)) / np.asarray(self.scale)
        logit = float(z @ np.asarray(self.weights) + self.bias)
        return 1.0 / (1.0 + math.exp(-max(-60.0, min(60.0, logit))))

    @property
    def label(self) -> str:
        where = "final norm" if self.layer < 0 else f"layer {self.layer}"
        return f"answerability probe ({where})"

    def save(self, folder: Path | None = None) -> Path:
        folder = folder or probes_dir()
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / probe_file_name(self.model_sha256, self.prompt_sha256)
        data = asdict(self)
        for key in ("mean", "scale", "weights"):
            data[key] = [round(float(v), 6) for v in data[key]]
        path.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
        return path

    @classmethod
    def load(cls, path: Path) -> Probe:
        data = json.loads(path.read_text(encoding="utf-8"))
        for key in ("mean", "scale", "weights"):
            data[key] = tuple(data[key])
        return cls(**data)


def probe_file_name(model_sha256: str, prompt_sha256: str) -> str:
    return f"{model_sha256[:16]}-{prompt_sha256[:12]}.json"


def text_sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def prompt_key(instructions: str) -> str:
    """The sha256 that names the judge's prompt: its layout and the instructions in it."""
    return text_sha256(f"{LAYOUT}\n{instructions}")


def file_sha256(path: Path) -> str:
    """The file's sha256: from a ``<file>.sha256`` stamp newer than the file (bundled models are
    checked against theirs when assembled), else computed once and cached by path, size and mtime."""
    path = Path(path)
    st = path.stat()
    stamp = path.with_name(path.name + ".sha256")
    if stamp.exists() and stamp.stat().st_mtime_ns >= st.st_mtime_ns:
        words = stamp.read_text(encoding="utf-8").split()
        if words and len(words[0]) == 64:
            return words[0]
    key = f"{path.resolve()}:{st.st_size}:{st.st_mtime_ns}"
    store = default_cache_dir() / "sha256.json"
    known = {}
    if store.exists():
        try:
            known = json.loads(store.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            known = {}
    if key not in known:
        digest = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
        known[key] = digest.hexdigest()
        store.parent.mkdir(parents=True, exist_ok=True)
        tmp = store.with_name(f"sha256.json.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(known), encoding="utf-8")
        tmp.replace(store)
    return known[key]


def probes_dir() -> Path:
    return Path(os.environ.get("LOCALRAG_PROBES_DIR", PROBES_DIR))


def probe_layers(model_path: Path, folder: Path | None = None) -> tuple[int, ...]:
    """The layers the probes for this model file read (hashing the file only when a probe was fitted
    on a file of its size)."""
    size = Path(model_path).stat().st_size
    probes = [Probe.load(p) for p in sorted((folder or probes_dir()).glob("*.json"))]
    if not any(p.model_bytes == size for p in probes):
        return ()
    sha = file_sha256(Path(model_path))
    return tuple(sorted({p.layer for p in probes if p.model_sha256 == sha}))


def find_probe(model_sha256: str, instructions: str, folder: Path | None = None) -> Probe | None:
    """The probe fitted on this model file with these instructions (in ``LAYOUT``), or None."""
    key = prompt_key(instructions)
    path = (folder or probes_dir()) / probe_file_name(model_sha256, key)
    if not path.exists():
        return None
    probe = Probe.load(path)
    if probe.model_sha256 != model_sha256 or probe.prompt_sha256 != key:
        return None
    return probe


def judge_hidden(probe: Probe | None, states: dict[int, np.ndarray], why_none: str = "") -> Judgement:
    """The probe's judgement of the hidden states of the judge's prompt; the evidence check alone (named,
    with ``why_none``) when there is no probe or no state of its layer."""
    if probe is None or probe.layer not in states:
        why = why_none or ("no answerability probe for this model file and prompt" if probe is None
                           else f"the model gave no hidden state of layer {probe.layer}")
        return Judgement(f"{EVIDENCE_ONLY} ({why})")
    p = probe.p_answerable(states[probe.layer])
    return Judgement(probe.label, p, p < probe.refuse_below)


def unanswerable_reason(judgement: Judgement) -> str:
    """Why an answer the judge refused before it was written was refused, in words."""
    return (f"the answer model read no answer in them (its {judgement.judge}: "
            f"p(answerable) {judgement.p_answerable:.2f})")
