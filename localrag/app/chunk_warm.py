"""The chunk cache's background warm: the approximate prefill's entries (``prefill="reuse"``,
``localrag.backends.chunk_reuse``) computed for a collection's chunks while nobody asks.

A collection becomes one *read with reuse* when an answer asks for that prefill in it (or the
page's switch is turned to it); its chunks are then warmed, and warmed again after its documents
change (an ingest, a removal, a watched folder's sync). One thread does the warming, a collection
at a time: it waits until nobody has used or waited for the model for a while, then takes its
turn in the generation queue like an answer, on the generation thread (never beside an answer),
newest documents first, asking between pieces of 32 tokens whether someone waits; if so it gives
way at once and goes on when the model is idle again. A warm stops at the cache's cap rather than
evict what questions used (``Answerer.warm_chunks``).

    warmer = ChunkWarmer(lambda: services.answerer, services.index, services.queue, services.generation,
                         closing, services._wait_idle, services._someone_waits)
    warmer.want("default")
    warmer.readiness("default")        # ChunkReadiness(total=60, ready=48, ...) or None
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from localrag.answer import Answerer, ChunkReadiness
from localrag.app.serving import Cancelled, GenerationQueue, GenerationThread, QueueFull
from localrag.rag.index import DocumentIndex

CHUNK_WARM = "localrag:chunk-warm"  # the queue owner of the warm


class ChunkWarmer:
    def __init__(self, answerer: Callable[[], Answerer | None], index: Callable[[str], DocumentIndex],
                 queue: GenerationQueue, generation: GenerationThread, closing: threading.Event,
                 wait_idle: Callable[[], None], someone_waits: Callable[[], bool]) -> None:
        self._answerer, self._index, self._queue, self._generation = answerer, index, queue, generation
        self._closing, self._wait_idle, self._someone_waits = closing, wait_idle, someone_waits
        self._lock = threading.Lock()
        self._wanted: dict[str, None] = {}  # collections waiting to be warmed, in order
        self._thread: threading.Thread | None = None
        self._readiness: dict[str, ChunkReadiness] = {}  # the last warm's count, by collection
        self.collections: set[str] = set()  # those read with reuse

    def want(self, name: str) -> None:
        """Warm ``name`` (now one read with reuse) in the background."""
        with self._lock:
            self.collections.add(name)
            self._wanted[name] = None
            if self._thread is None and not self._closing.is_set():
                self._thread = threading.Thread(target=self._loop, name="localrag-chunk-warm", daemon=True)
                self._thread.start()

    def asked(self, name: str) -> None:
        """An answer read ``name`` with reuse: warmed unless its last warm finished since its
        documents last changed."""
        done = self._readiness.get(name)
        if done is None or not done.done:
            self.want(name)

    def documents_changed(self, name: str) -> None:
        self._readiness.pop(name, None)
        if name in self.collections:
            self.want(name)

    def readiness(self, name: str) -> ChunkReadiness | None:
        return self._readiness.get(name)

    def _loop(self) -> None:
        while True:
            with self._lock:
                if not self._wanted or self._closing.is_set():
                    self._thread = None
                    return
                name = next(iter(self._wanted))
                del self._wanted[name]
            try:
                self._warm(name)
            except Exception as exc:  # a warm is an optimisation: the answers read what is missing
                self._readiness[name] = ChunkReadiness(note=f"not warmed ({type(exc).__name__}: {exc})")

    def _warm(self, name: str) -> None:
        def seen(r: ChunkReadiness) -> None:
            self._readiness[name] = r

        while not self._closing.is_set():
            self._wait_idle()
            answerer = self._answerer()
            if self._closing.is_set() or answerer is None or not answerer.can_reuse:
                return
            hits = self._index(name).live_hits()
            try:
                with self._queue.turn(CHUNK_WARM):
                    answerer = self._answerer()
                    if answerer is None:
                        return
                    done = self._generation.call(lambda a=answerer, h=hits: a.warm_chunks(h, self._someone_waits, seen))
            except QueueFull:  # busy people: try again when they are done
                continue
            except Cancelled:
                return
            self._readiness[name] = done
            if not done.stopped:
                return
