"""What the UI talks to: the loaded models, the document indexes, the answer modes and the history.

No Gradio here. ``Services`` owns the long-lived objects (one target engine, an optional
Grounded verifier and Speedup draft model, one DocumentIndex per collection sharing one
embedding model) and answers "can this mode run, and if not, why?" from the mode registry,
so the UI can explain unusable choices instead of ignoring them.

    services = Services(AppConfig(), engine=Engine.load(ModelConfig()))
    ok, why = services.mode_status("rasd")
    answerer, notes = services.answerer(settings)
"""

from __future__ import annotations

import ipaddress
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from localrag.answer import Answerer, RasdState
from localrag.backends.base import Backend
from localrag.config import AppConfig, GenerationConfig, GroundedConfig, ModelConfig
from localrag.engine import Engine
from localrag.grounded import verifier_config
from localrag.models import ModelError
from localrag.modes import MODES, AnswerMode
from localrag.rag.check import IndexCheck
from localrag.rag.config import IndexConfig
from localrag.rag.index import DocumentIndex
from localrag.rag.watch import FolderState, FolderWatcher
from localrag.rasd import load_draft
from localrag.serving import GenerationQueue, GenerationThread, QueueFull
from localrag.ui.history import ChatStore

NO_DRAFT = "(none: retrieval only)"
MODE_DEFAULT = "mode default"  # the unsupported-answer setting that leaves it to the mode (Grounded refuses)
DEFAULT_COLLECTION = "default"
LOAD_ERRORS = (ModelError, OSError, RuntimeError, ValueError)  # a model that fails to load says why


@dataclass(frozen=True)
class Settings:
    """The knobs of the side panel, as one value handed to every chat call. These defaults are
    the UI's defaults (the page's controls start from them)."""

    mode: str = "plain"
    collection: str = DEFAULT_COLLECTION
    draft_model: str = NO_DRAFT
    temperature: float = 0.0
    max_tokens: int = 256
    k: int = 5
    on_unsupported: str = MODE_DEFAULT  # warn | refuse | the mode's default (warn; Grounded: refuse)

    def unsupported_policy(self) -> str | None:
        """The request's ``on_unsupported``: None leaves it to the mode."""
        return None if self.on_unsupported == MODE_DEFAULT else self.on_unsupported

    def generation(self) -> GenerationConfig:
        return GenerationConfig(max_tokens=int(self.max_tokens), temperature=float(self.temperature))


class Services:
    """Long-lived state shared by every browser tab and API request. Generation and model swaps
    take turns in ``queue`` (``localrag.serving.GenerationQueue``); answers are computed on
    ``generation`` (``localrag.serving.GenerationThread``: one thread, so one OpenMP team).

    The factories replace the real model, index and draft loading (tests use fakes); ``modes``
    replaces the mode registry."""

    def __init__(self, config: AppConfig, engine: Engine | None = None, engine_error: str = "",
                 index_factory: Callable[[str], DocumentIndex] | None = None,
                 model_loader: Callable[[ModelConfig], Engine] | None = None,
                 draft_loader: Callable[[Backend, str], Backend] | None = None,
                 modes: Mapping[str, AnswerMode] = MODES) -> None:
        self.config = config
        self.engine = engine
        self.engine_error = engine_error
        self.model_config = config.model
        self.modes = modes
        # one generation / model swap at a time, for every tab and API request; tickets, not threads,
        # hold the turn (streaming generators may be resumed on another worker thread)
        self.queue = GenerationQueue(max_waiting=config.max_waiting)
        # ... and every answer is computed on this one thread, whichever front end asked for it
        self.generation = GenerationThread()
        self.history = ChatStore(Path(config.data_dir) / "history.sqlite")
        self.uploads_dir = Path(config.data_dir) / "uploads"
        self._index_factory = index_factory or self._real_index
        self._model_loader = model_loader or Engine.load
        self._draft_loader = draft_loader or load_draft
        self._indexes: dict[str, DocumentIndex] = {}
        self._index_lock = threading.Lock()
        self._embed_lock = threading.Lock()
        self._embedder_ready = False
        self._embedder = None
        self._verifier: Engine | None = None
        self._verifier_error = ""
        self._drafts: dict[str, Backend] = {}
        self._rasd_states: dict[tuple, RasdState] = {}  # the Speedup decoder (what it learned) per (engine, draft)
        self._watcher: FolderWatcher | None = None
        self._watcher_lock = threading.Lock()
        self.index_health = ""  # check_index's warning ('' while the index is healthy or unchecked)

    # ------------------------------------------------------------ models
    def swap_model(self, model: str, gpu_layers: int) -> str:
        """Load another target model, in line behind the answers already asked; on failure keep
        the current one. Returns a status message."""
        try:
            with self.queue.turn("model-swap"):
                self.load_model(model, gpu_layers)
        except QueueFull as exc:
            return f"❌ Could not load **{model}**: {exc}; try again in a moment."
        except LOAD_ERRORS as exc:
            kept = f" Still using {self.engine.model_name}." if self.engine is not None else ""
            return f"❌ Could not load **{model}**: {exc}.{kept}"
        return f"✅ Loaded **{self.engine.model_name}** (GPU layers {gpu_layers})."

    def load_model(self, model: str, gpu_layers: int | None = None) -> None:
        """Replace the target model. The caller holds the queue's turn; raises LOAD_ERRORS and
        then keeps the current model."""
        layers = self.model_config.n_gpu_layers if gpu_layers is None else int(gpu_layers)
        cfg = ModelConfig(model=model, n_gpu_layers=layers, n_ctx=self.model_config.n_ctx)
        new = self._model_loader(cfg)
        old, self.engine, self.engine_error, self.model_config = self.engine, new, "", cfg
        self._drafts.clear()  # drafts were checked against the old target's vocabulary
        self._rasd_states.clear()  # and acceptance was learned for the old target
        if old is not None:
            old.close()

    def model_status(self) -> str:
        """The header line: the model (or why none is loaded), then the index's health warning, if any."""
        if self.engine is None:
            line = f"❌ No model loaded: {self.engine_error or 'unknown error'}. Pick a model and press Load."
        else:
            line = f"Model: **{self.engine.model_name}**"
            if not self.engine.backend.deterministic:  # GPU layers, llama.cpp's default kernels, transformers
                line += (" · not bit-exact: the same question may get a different answer at the model's "
                         "near-ties (batch-dependent kernels)")
        return line + (f"  \n{self.index_health}" if self.index_health else "")

    def check_index(self) -> str:
        """The cheap part of ``python -m localrag check`` (no sweep, no hashing) over every collection,
        run at start: '' when healthy, else one warning line naming the problems and the command."""
        found = []
        for name in self.collections():
            report = IndexCheck(self.index(name), uploads_dir=self.uploads_dir).run(full=False)
            if not report.ok:
                found.append(f"{name}: {report.summary()}")
        self.index_health = "" if not found else (
            f"⚠️ The document index needs attention ({'; '.join(found)}). "
            f"Run `python -m localrag check --repair` (`python -m localrag check` lists each problem).")
        return self.index_health

    def verifier(self) -> Engine:
        """The Grounded mode verifier (``GroundedConfig.verifier``), loaded on first use."""
        if self._verifier is None and not self._verifier_error:
            grounded = GroundedConfig()
            try:
                self._verifier = self._model_loader(verifier_config(grounded, self.model_config))
            except LOAD_ERRORS as exc:
                self._verifier_error = f"verifier {grounded.verifier} failed to load: {exc}"
        if self._verifier is None:
            raise RuntimeError(self._verifier_error)
        return self._verifier

    def draft(self, name: str) -> tuple[Backend | None, str]:
        """(draft model or None, note). An unusable draft is reported, never silently dropped."""
        if not name or name == NO_DRAFT:
            return None, ""
        if name in self._drafts:
            return self._drafts[name], ""
        try:
            model = self._draft_loader(self.engine.backend, name)
        except LOAD_ERRORS as exc:
            return None, f"draft model {name} is unusable: {exc}. Speculating from retrieval only."
        self._drafts[name] = model
        return model, ""

    # ------------------------------------------------------------ modes
    def mode_label(self, mode: str) -> str:
        return self.modes[mode].label if mode in self.modes else mode

    def mode_status(self, mode: str) -> tuple[bool, str]:
        """(usable, reason when not), from the mode itself."""
        if mode not in self.modes:
            return False, f"unknown mode {mode!r}"
        if self.engine is None:
            return False, f"no model is loaded ({self.engine_error or 'load one under Model'})"
        return self.modes[mode].available(self.engine)

    # ------------------------------------------------------------ documents
    def index(self, collection: str) -> DocumentIndex:
        """The DocumentIndex of a collection (cached; all share one embedding model)."""
        collection = (collection or DEFAULT_COLLECTION).strip()
        with self._index_lock:
            if collection not in self._indexes:
                self._indexes[collection] = self._index_factory(collection)
            return self._indexes[collection]

    def _real_index(self, collection: str) -> DocumentIndex:
        cfg = IndexConfig.from_env(index_dir=self.config.index_dir, collection=collection)
        idx = DocumentIndex(cfg, embedder=self._embedder)
        self._embedder = idx.embedder
        return idx

    def ensure_embedder(self) -> None:
        """Load the shared embedding model once; concurrent callers wait instead of loading it twice."""
        with self._embed_lock:
            if not self._embedder_ready:
                self.index(DEFAULT_COLLECTION).embedder.embed(["warm up"])
                self._embedder_ready = True

    def collections(self) -> list[str]:
        names = set(self.index(DEFAULT_COLLECTION).collections()) | set(self._indexes) | {DEFAULT_COLLECTION}
        return sorted(names)

    # ------------------------------------------------------------ watched folders
    @property
    def watcher(self) -> FolderWatcher:
        """Keeps watched folders in sync into this app's indexes (started on first use). Its syncs
        run on its own thread under each index's write lock; answers never wait for them."""
        with self._watcher_lock:
            if self._watcher is None:
                self._watcher = FolderWatcher(self.index).start()
            return self._watcher

    def start_watching(self) -> int:
        """Follow every folder any collection remembers: each is synced first (catching what changed
        while the app was down), on the watcher's thread. Returns how many."""
        records = self.index(DEFAULT_COLLECTION).manifest.watches()
        if records:
            self.watcher.resume(records)
        return len(records)

    def watch_states(self, collection: str) -> list[FolderState]:
        """What the watcher does with each folder of ``collection`` ([] before it started)."""
        return self._watcher.states(collection) if self._watcher is not None else []

    def watch_syncs(self) -> int:
        """Syncs the watcher finished so far (0 before it started)."""
        return self._watcher.completed if self._watcher is not None else 0

    @property
    def serves_this_machine_only(self) -> bool:
        """Bound to a loopback address without a share link: only people at this machine reach the
        page. Watching a folder by its path reads this machine's files, so only then is it offered."""
        if self.config.share:
            return False
        if self.config.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.config.host).is_loopback
        except ValueError:
            return False

    # ------------------------------------------------------------ answering
    def answerer(self, settings: Settings) -> tuple[Answerer, list[str]]:
        """An Answerer for these settings plus notes on anything that was not usable."""
        notes: list[str] = []
        mode = self.modes[settings.mode]
        draft = verifier = None
        state = RasdState()
        if mode.id == "rasd":
            draft, note = self.draft(settings.draft_model)
            if note:
                notes.append(note)
            # what the Speedup decoder learns outlives one answer: one per (loaded model, draft)
            key = (id(self.engine), settings.draft_model if draft is not None else None)
            state = self._rasd_states.setdefault(key, RasdState())
        if mode.id == "grounded":
            verifier = self.verifier()
        answerer = Answerer(self.engine, self.index(settings.collection), verifier=verifier, rasd_draft=draft,
                            rasd_state=state)
        return answerer, notes

    def close(self) -> None:
        if self._watcher is not None:
            self._watcher.stop()
        self.history.close()
        for idx in self._indexes.values():
            idx.close()
