"""The app's object graph, shared by the page, the HTTP API, the MCP tools and ``serve``.

No Gradio and no HTTP here. ``Services`` owns the long-lived objects: the loaded target and the
``Answerer`` over it (the models beside it, the search, the prompt, the check), one ``IndexSet``
(every collection's index, one embedding model), the chat history, the queue every answer and
model swap waits in, the one thread every answer is computed on, and the folder watcher. It
answers "can this mode run, and if not, why?" from the mode registry, so a front end explains
unusable choices instead of ignoring them, and it turns a front end's loose settings into an
``AnswerRequest`` (``request``).

    services = Services(AppConfig(), engine=Engine.load(ModelConfig()))
    ok, why = services.mode_status("speedup")
    request = services.request("speedup", "What is in the report?", values={"k": 8})
    for item in services.stream("speedup", request): ...
"""

from __future__ import annotations

import ipaddress
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

from localrag.answer import Answerer, ChunkReadiness, ModelHub
from localrag.app.chunk_warm import ChunkWarmer
from localrag.app.config import AppConfig
from localrag.app.history import ChatStore
from localrag.app.serving import Cancelled, GenerationQueue, GenerationThread, QueueFull
from localrag.backends.base import Backend
from localrag.backends.endpoint import EndpointEngine, EndpointError
from localrag.config import GenerationConfig, ModelConfig
from localrag.engine import Engine
from localrag.models import ModelError
from localrag.modes import MODES, AnswerMode, AnswerRequest, get_mode
from localrag.modes.base import CancelFlag, WarmUpStopped
from localrag.rag.check import IndexCheck
from localrag.rag.index import DocumentIndex
from localrag.rag.indexes import IndexSet
from localrag.rag.watch import FolderState, FolderWatcher
from localrag.rasd import load_draft
from localrag.results import AnswerProgress, AnswerResult

DEFAULT_COLLECTION = "default"
CLOSE_WAIT_S = 1.5  # how long close() waits for the answer under way to end (it ends at its next token)
WARM_UP = "localrag:warm-up"
WARM_UP_IDLE_S = 5.0  # a warm-up that gave way to an answer starts again after this long without one  # the queue owner of the modes' one-time work at start (warm_up)
LOAD_ERRORS = (ModelError, OSError, RuntimeError, ValueError)  # a model that fails to load says why
# (EndpointError is a RuntimeError: a serving engine that is down or serves another model says why too)


def open_engine(config: AppConfig) -> Engine | EndpointEngine:
    """The answer model the config names: loaded here (``config.model``), or, with
    ``config.endpoint``, a serving engine, checked now (it answers, and serves the model asked
    for: EndpointError, one line, if not). Raises LOAD_ERRORS."""
    if config.endpoint is None:
        return Engine.load(config.model)
    engine = EndpointEngine(config.endpoint)
    try:
        engine.check()
    except EndpointError:
        engine.close()
        raise
    return engine


class Services:
    """Long-lived state shared by every browser tab and API request. Generation and model swaps
    take turns in ``queue`` (``localrag.app.serving.GenerationQueue``); answers are computed on
    ``generation`` (``GenerationThread``: one thread, so one OpenMP team).

    The factories replace the real model, index and draft loading (tests use fakes); ``modes``
    replaces the mode registry."""

    def __init__(self, config: AppConfig, engine: Engine | None = None, engine_error: str = "",
                 index_factory: Callable[[str], DocumentIndex] | None = None,
                 model_loader: Callable[[ModelConfig], Engine] | None = None,
                 draft_loader: Callable[[Backend, str], Backend] | None = None,
                 modes: Mapping[str, AnswerMode] = MODES) -> None:
        self.config = config
        self.engine_error = engine_error
        self.model_config = config.model
        self.modes = dict(modes)
        self.queue = GenerationQueue(max_waiting=config.max_waiting)
        self.generation = GenerationThread()
        self.history = ChatStore(Path(config.data_dir) / "history.sqlite")
        self.uploads_dir = Path(config.data_dir) / "uploads"
        self.indexes = IndexSet(config.index, factory=index_factory)
        self._model_loader = model_loader or Engine.load
        self._draft_loader = draft_loader or load_draft
        self.answerer: Answerer | None = None
        self._watcher: FolderWatcher | None = None
        self._watcher_lock = threading.Lock()
        self._closing = threading.Event()  # close() was called: the warm-up gives up
        self.index_health = ""  # check_index's warning ('' while the index is healthy or unchecked)
        self.warmer = ChunkWarmer(lambda: self.answerer, self.index, self.queue, self.generation, self._closing,
                                  self._wait_idle, self._someone_waits)
        self._set_engine(engine)

    # ------------------------------------------------------------ models
    @property
    def engine(self) -> Engine | None:
        return self.answerer.engine if self.answerer is not None else None

    def _set_engine(self, engine: Engine | None) -> None:
        """A new target: a fresh Answerer (drafts were checked against the old target's vocabulary,
        and what the modes learned was learned for it)."""
        old = self.answerer
        self.answerer = None if engine is None else Answerer(
            engine, self.indexes, ModelHub(engine, self._model_loader, self._draft_loader), self.config.answer)
        if old is not None:
            old.close()

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
        old = self.engine
        self._set_engine(new)
        self.engine_error, self.model_config = "", cfg
        if old is not None:
            old.close()

    def model_status(self) -> str:
        """The header line: the model (or why none is loaded), then the index's health warning, if any."""
        if self.engine is None:
            line = f"❌ No model loaded: {self.engine_error or 'unknown error'}. Pick a model and press Load."
        elif self.answerer.remote:
            line = (f"Model: **{self.engine.model_name}** on the serving engine {self.engine.config.base} "
                    "(Speedup runs in-process only; speculation there is the server's own)")
        else:
            line = f"Model: **{self.engine.model_name}**"
            if not self.engine.backend.deterministic:  # GPU layers, llama.cpp's default kernels, transformers
                line += (" · not bit-exact: the same question may get a different answer at the model's "
                         "near-ties (batch-dependent kernels)")
        return line + (f"  \n{self.index_health}" if self.index_health else "")

    def default_draft(self) -> str | None:
        """The registry's draft model for the loaded target (None: none pairs with it)."""
        return self.answerer.models.default_draft() if self.answerer is not None else None

    # ------------------------------------------------------------ modes and answers
    def mode(self, name: str) -> AnswerMode:
        """The mode called ``name`` (an id, or an old spelling); ValueError naming the choices."""
        return get_mode(name, self.modes)

    def mode_label(self, name: str) -> str:
        try:
            return self.mode(name).label
        except ValueError:
            return name

    def mode_status(self, name: str) -> tuple[bool, str]:
        """(usable, reason when not), from the mode itself."""
        try:
            mode = self.mode(name)
        except ValueError as exc:
            return False, str(exc)
        if self.answerer is None:
            return False, f"no model is loaded ({self.engine_error or 'load one under Model'})"
        return mode.available(self.answerer)

    def request(self, mode: str, question: str, history: Sequence[dict] = (), gen: GenerationConfig | None = None,
                collection: str | None = None, values: Mapping[str, object] | None = None,
                cancel: CancelFlag | None = None, documents: bool = True) -> AnswerRequest:
        """An AnswerRequest from a front end's loose settings: ``values`` become the mode's options
        (ValueError naming a bad one)."""
        return AnswerRequest(question, tuple(history), gen or GenerationConfig(), collection=collection,
                             documents=documents, cancel=cancel, options=self.mode(mode).options(values))

    def warm_up(self) -> list[str]:
        """Each mode's one-time work (``AnswerMode.warm_up``: Speedup times the models once per
        machine), done now so that no first answer waits for it: in line like an answer, on the
        generation thread (never beside an answer), and giving way: an answer that comes meanwhile
        stops it and goes first, and it starts again once the model has been idle WARM_UP_IDLE_S.
        Returns what was done, in words; a mode whose warm-up fails says why (its first answer then
        does the work, as before)."""
        done: list[str] = []
        for mode in self.modes.values():
            note = ""
            while not self._closing.is_set():
                try:
                    with self.queue.turn(WARM_UP):
                        if self.answerer is None:
                            return done
                        note = self.generation.call(lambda m=mode: m.warm_up(self.answerer, self._someone_waits))
                    break
                except WarmUpStopped:
                    self._wait_idle()
                except (QueueFull, Cancelled):  # busy people (their answers do it), or stopping
                    break
                except Exception as exc:  # reported; the first answer then does the work as before
                    note = f"{mode.label}: not prepared ahead ({type(exc).__name__}: {exc})"
                    break
            if note:
                done.append(note)
        return done

    def _someone_waits(self) -> bool:
        return self.queue.waiting() > 0 or self._closing.is_set()

    def _wait_idle(self) -> None:
        """Until nobody has used or waited for the model for WARM_UP_IDLE_S (or the app stops)."""
        quiet_since = None
        while not self._closing.wait(0.25):
            if self.queue.busy or self.queue.waiting():
                quiet_since = None
            elif quiet_since is None:
                quiet_since = time.monotonic()
            elif time.monotonic() - quiet_since >= WARM_UP_IDLE_S:
                return

    @property
    def warming_up(self) -> bool:
        """The model's turn is the modes' one-time work (``warm_up``), not an answer."""
        return self.queue.running_owner() == WARM_UP

    def stream(self, mode: str, request: AnswerRequest) -> Iterator[str | AnswerProgress | AnswerResult]:
        """The mode's answer, computed on the generation thread (the caller holds the queue's turn).
        An answer with the approximate prefill has its collection's chunks warmed (``note_prefill``)."""
        self.note_prefill(request)
        return self.generation.iterate(self.mode(mode).stream(self.answerer, request))

    def note_prefill(self, request: AnswerRequest) -> None:
        """A request with the approximate prefill makes its collection one read with reuse: its
        chunks are warmed in the background (``localrag.app.chunk_warm``)."""
        if request.documents and getattr(request.options, "prefill", "exact") == "reuse":
            self.warmer.asked(request.collection or DEFAULT_COLLECTION)

    # ------------------------------------------------------------ the chunk cache's warm
    def warm_chunk_cache(self, collection: str | None) -> None:
        """Warm ``collection``'s chunk-cache entries in the background (the page's switch turned to reuse)."""
        self.warmer.want(collection or DEFAULT_COLLECTION)

    def documents_changed(self, collection: str | None) -> None:
        """Documents were added to (or removed from) ``collection``: warmed again if it is read with reuse."""
        self.warmer.documents_changed(collection or DEFAULT_COLLECTION)

    def warm_cached_collections(self) -> int:
        """At start: when the chunk cache holds entries (the user reads with reuse), warm every
        collection (the chunks found unwarmed: documents added while the app was down). How many."""
        if self.answerer is None or not self.answerer.can_reuse or not self.answerer.kv_store().entries():
            return 0
        names = self.collections()
        for name in names:
            self.warmer.want(name)
        return len(names)

    def chunk_readiness(self, collection: str | None) -> ChunkReadiness | None:
        """The last count of ``collection``'s chunks in the chunk cache (None: not counted since its
        documents last changed, or never read with reuse)."""
        return self.warmer.readiness(collection or DEFAULT_COLLECTION)

    # ------------------------------------------------------------ documents
    def index(self, collection: str | None) -> DocumentIndex:
        """The DocumentIndex of a collection (one cache; all share one embedding model)."""
        return self.indexes.get(collection)

    def ensure_embedder(self) -> None:
        """Load the shared embedding model once; concurrent callers wait instead of loading it twice."""
        self.indexes.warm()

    def collections(self) -> list[str]:
        return self.indexes.collections()

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

    # ------------------------------------------------------------ watched folders
    @property
    def watcher(self) -> FolderWatcher:
        """Keeps watched folders in sync into this app's indexes (started on first use). Its syncs
        run on its own thread under each index's write lock; answers never wait for them."""
        with self._watcher_lock:
            if self._watcher is None:
                self._watcher = FolderWatcher(self.index, on_synced=self._synced).start()
            return self._watcher

    def _synced(self, outcome) -> None:
        report = outcome.report
        if report is not None and (report.added or report.replaced or report.removed):
            self.documents_changed(outcome.collection)

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

    def close(self, wait_s: float = CLOSE_WAIT_S) -> None:
        """Stop: the answer under way ends at its next token and the waiting ones never start; once
        each has been saved and has left the line (at most ``wait_s``), the models, indexes and
        history close. Work that cannot stop midway (Speedup timing the models at start) keeps them
        open: the process's end frees them, never a model freed under the thread computing with it."""
        self._closing.set()
        self.queue.cancel_all()
        if self._watcher is not None:
            self._watcher.stop()
        if not self.queue.wait_empty(wait_s):
            return
        self.history.close()
        if self.answerer is not None:
            self.answerer.close()
        self.indexes.close()
