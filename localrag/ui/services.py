"""What the UI talks to: the loaded models, the document indexes, the answerer and the history.

No Gradio here. ``Services`` owns the long-lived objects (one target engine, an
optional Grounded verifier and RASD draft model, one DocumentIndex per
collection sharing one embedding model) and answers "can this mode run, and if
not, why?" so the UI can explain unusable choices instead of ignoring them.

    services = Services(AppConfig(), engine=Engine.load(ModelConfig()))
    ok, why = services.mode_status("rasd")
    answerer = services.answerer(settings)
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from localrag.config import AppConfig, GenerationConfig, ModelConfig
from localrag.history import ChatStore
from localrag.models import ModelError

MODE_LABELS = {"plain": "Plain", "rasd": "Speedup (RASD)", "specrag": "Grounded (Speculative RAG)"}
NO_DRAFT = "(none: retrieval only)"
VERIFIER_MODEL = "gemma3-270m"
DEFAULT_COLLECTION = "default"


@dataclass(frozen=True)
class Settings:
    """The knobs of the side panel, as one value handed to every chat call."""

    mode: str = "plain"
    collection: str = DEFAULT_COLLECTION
    draft_model: str = NO_DRAFT
    temperature: float = 0.0
    max_tokens: int = 256
    k: int = 5

    def generation(self) -> GenerationConfig:
        return GenerationConfig(max_tokens=int(self.max_tokens), temperature=float(self.temperature))


def _import(module: str, name: str) -> tuple[Any, str]:
    """(attribute, "") or (None, why it cannot be imported)."""
    try:
        return getattr(importlib.import_module(module), name), ""
    except ImportError as exc:
        return None, f"{module}.{name} is not in this build ({exc})"
    except AttributeError:
        return None, f"{module}.{name} is not in this build yet"
    except Exception as exc:  # a half-written module must not take the UI down
        return None, f"{module} failed to import: {type(exc).__name__}: {exc}"


class Services:
    """Long-lived state shared by every browser tab. Generation is serialised by ``lock``."""

    def __init__(self, config: AppConfig, engine=None, engine_error: str = "",
                 index_factory: Callable[[str], Any] | None = None,
                 answerer_factory: Callable[..., Any] | None = None,
                 model_loader: Callable[[ModelConfig], Any] | None = None,
                 draft_loader: Callable[[Any, str], Any] | None = None) -> None:
        self.config = config
        self.engine = engine
        self.engine_error = engine_error
        self.model_config = config.model
        self.lock = threading.Lock()  # one generation / model swap at a time (a plain Lock: streaming
        # generators may be resumed on another worker thread, which an RLock would refuse)
        self.stop_event = threading.Event()
        self.history = ChatStore(Path(config.data_dir) / "history.sqlite")
        self.uploads_dir = Path(config.data_dir) / "uploads"
        self._index_factory = index_factory
        self._answerer_factory = answerer_factory
        self._model_loader = model_loader
        self._draft_loader = draft_loader
        self._indexes: dict[str, Any] = {}
        self._index_lock = threading.Lock()
        self._embed_lock = threading.Lock()
        self._embedder_ready = False
        self._embedder = None
        self._verifier = None
        self._verifier_error = ""
        self._drafts: dict[str, Any] = {}
        self._rasd_states: dict[tuple, dict] = {}  # the RASD decoder (what it learned) per (engine, draft)

    # ------------------------------------------------------------ models
    def load_engine(self, model_config: ModelConfig):
        if self._model_loader is not None:
            return self._model_loader(model_config)
        from localrag.engine import Engine

        return Engine.load(model_config)

    def swap_model(self, model: str, gpu_layers: int) -> str:
        """Load another target model; on failure keep the current one. Returns a status message."""
        cfg = ModelConfig(model=model, n_gpu_layers=int(gpu_layers), n_ctx=self.model_config.n_ctx)
        with self.lock:
            try:
                new = self.load_engine(cfg)
            except (ModelError, OSError, RuntimeError, ValueError) as exc:
                kept = f" Still using {self.engine.model_name}." if self.engine is not None else ""
                return f"❌ Could not load **{model}**: {exc}.{kept}"
            old, self.engine, self.engine_error, self.model_config = self.engine, new, "", cfg
            self._drafts.clear()  # drafts were checked against the old target's vocabulary
            self._rasd_states.clear()  # and acceptance was learned for the old target
            if old is not None and hasattr(old, "close"):
                old.close()
        return f"✅ Loaded **{self.engine.model_name}** (GPU layers {gpu_layers})."

    def model_status(self) -> str:
        if self.engine is None:
            return f"❌ No model loaded: {self.engine_error or 'unknown error'}. Pick a model and press Load."
        return f"Model: **{self.engine.model_name}**"

    def verifier(self):
        """The Grounded mode verifier (bundled gemma3-270m), loaded on first use."""
        if self._verifier is None and not self._verifier_error:
            try:
                self._verifier = self.load_engine(ModelConfig(model=VERIFIER_MODEL, n_ctx=4096,
                                                              n_gpu_layers=self.model_config.n_gpu_layers))
            except (ModelError, OSError, RuntimeError, ValueError) as exc:
                self._verifier_error = f"verifier {VERIFIER_MODEL} failed to load: {exc}"
        if self._verifier is None:
            raise RuntimeError(self._verifier_error)
        return self._verifier

    def draft(self, name: str) -> tuple[Any, str]:
        """(draft model or None, note). An unusable draft is reported, never silently dropped."""
        if not name or name == NO_DRAFT:
            return None, ""
        if name in self._drafts:
            return self._drafts[name], ""
        loader = self._draft_loader
        if loader is None:
            loader, why = _import("localrag.spec", "load_draft")
            if loader is None:
                return None, f"draft model {name} not used: {why}"
        try:
            model = loader(self.engine.backend, name)
        except (ModelError, OSError, RuntimeError, ValueError) as exc:
            return None, f"draft model {name} is unusable: {exc}. Speculating from retrieval only."
        self._drafts[name] = model
        return model, ""

    # ------------------------------------------------------------ modes
    def mode_status(self, mode: str) -> tuple[bool, str]:
        """(usable, reason when not)."""
        if mode not in MODE_LABELS:
            return False, f"unknown mode {mode!r}"
        if self.engine is None:
            return False, f"no model is loaded ({self.engine_error or 'load one under Model'})"
        if self._answerer_factory is None:
            cls, why = _import("localrag.answer", "Answerer")
            if cls is None:
                return False, why
        if mode == "rasd":
            fn, why = _import("localrag.spec", "make_rasd_decoder")
            if fn is None:
                return False, f"the RASD speculative decoder (issue 4) is not available: {why}"
        if mode == "specrag":
            cls, why = _import("localrag.specrag", "SpeculativeRAG")
            if cls is None:
                return False, f"the Speculative RAG pipeline (issue 6) is not available: {why}"
        return True, ""

    # ------------------------------------------------------------ documents
    def index(self, collection: str):
        """The DocumentIndex of a collection (cached; all share one embedding model)."""
        collection = (collection or DEFAULT_COLLECTION).strip()
        with self._index_lock:
            return self._index(collection)

    def _index(self, collection: str):
        if collection not in self._indexes:
            if self._index_factory is not None:
                self._indexes[collection] = self._index_factory(collection)
            else:
                from localrag.rag import DocumentIndex, IndexConfig

                cfg = IndexConfig.from_env(index_dir=self.config.index_dir, collection=collection)
                idx = DocumentIndex(cfg, embedder=self._embedder)
                self._embedder = idx.embedder
                self._indexes[collection] = idx
        return self._indexes[collection]

    def ensure_embedder(self) -> None:
        """Load the shared embedding model once; concurrent callers wait instead of loading it twice."""
        with self._embed_lock:
            if not self._embedder_ready:
                embedder = getattr(self.index(DEFAULT_COLLECTION), "embedder", None)
                if embedder is not None:
                    embedder.embed(["warm up"])
                self._embedder_ready = True

    def collections(self) -> list[str]:
        names = set(self.index(DEFAULT_COLLECTION).collections()) | set(self._indexes) | {DEFAULT_COLLECTION}
        return sorted(names)

    # ------------------------------------------------------------ answering
    def answerer(self, settings: Settings) -> tuple[Any, list[str]]:
        """An Answerer for these settings plus notes on anything that was not usable."""
        notes: list[str] = []
        index = self.index(settings.collection)
        draft = verifier = None
        if settings.mode == "rasd":
            draft, note = self.draft(settings.draft_model)
            if note:
                notes.append(note)
        if settings.mode == "specrag":
            verifier = self.verifier()
        factory = self._answerer_factory
        if factory is None:
            factory, why = _import("localrag.answer", "Answerer")
            if factory is None:
                raise RuntimeError(why)
        kwargs = {"verifier": verifier, "rasd_draft": draft}
        if settings.mode == "rasd":
            # what RASD learns outlives one answer: one decoder per (loaded model, draft)
            key = (id(self.engine), settings.draft_model if draft is not None else None)
            kwargs["rasd_state"] = self._rasd_states.setdefault(key, {})
        return factory(self.engine, index, **kwargs), notes

    def close(self) -> None:
        self.history.close()
        for idx in self._indexes.values():
            if hasattr(idx, "close"):
                idx.close()
