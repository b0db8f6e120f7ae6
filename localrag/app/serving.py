"""One generation at a time, in arrival order: the queue every client goes through.

The UI's browser tabs, the HTTP API's requests and model swaps all use one loaded model, so
they take turns. ``GenerationQueue`` is that line:

- FIFO and bounded: past ``max_waiting`` waiting requests, ``submit`` refuses at once
  (``QueueFull``; the API answers 429) instead of letting the line grow without limit;
- every request holds a ``Ticket`` with its own cancel flag, so Stop in one browser tab, or a
  disconnected HTTP client, cancels that request only (waiting or running);
- a waiting request can ask its place in line (the UI shows "waiting: 2nd in line");
- the ticket measures how long it waited, which goes into ``AnswerStats.waited_s``.

    queue = GenerationQueue(max_waiting=8)
    ticket = queue.submit(owner="tab-1")             # QueueFull when the line is full
    try:
        while not queue.wait_turn(ticket, timeout=0.5):
            if ticket.cancelled: break
            print("waiting:", ordinal(queue.position(ticket)), "in line")
        else:
            ...                                      # generate; check ticket.cancelled between pieces
    finally:
        queue.release(ticket)

Tickets, not threads, hold the turn: a streaming generator resumed on another worker thread
(Gradio does that) still releases its own turn. ``GenerationThread`` is the one thread a server
computes its answers on (see there why one). No project imports: any layer may use it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Generator, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass, field
from queue import SimpleQueue
from typing import TypeVar

log = logging.getLogger(__name__)
T = TypeVar("T")

DEFAULT_MAX_WAITING = 8


class QueueFull(RuntimeError):
    """The line is full: the request was refused without waiting."""


class Cancelled(RuntimeError):
    """The request was cancelled before its turn came."""


@dataclass(eq=False)
class Ticket:
    """One request's place in line. ``cancel`` is set by ``GenerationQueue.cancel`` (or directly)."""

    owner: str
    enqueued: float
    cancel: threading.Event = field(default_factory=threading.Event)
    started: float | None = None  # when its turn came
    released: bool = False

    @property
    def cancelled(self) -> bool:
        return self.cancel.is_set()

    @property
    def waited_s(self) -> float:
        """Time from submit to the start of its turn (0 until it starts)."""
        return self.started - self.enqueued if self.started is not None else 0.0


class GenerationQueue:
    """FIFO line for the one model: at most one ticket runs; at most ``max_waiting`` wait.

    Invariant: ``_line`` holds the unreleased tickets in submit order. The running ticket is
    the one with ``started`` set (at most one); a cancelled ticket that has not started never
    starts and does not count as waiting, so it cannot hold up the tickets behind it even
    before its owner releases it.
    """

    def __init__(self, max_waiting: int = DEFAULT_MAX_WAITING, clock: Callable[[], float] = time.monotonic):
        if max_waiting < 0:
            raise ValueError("max_waiting must be >= 0")
        self.max_waiting = max_waiting
        self._clock = clock
        self._cond = threading.Condition()
        self._line: deque[Ticket] = deque()

    # ------------------------------------------------------------ joining and leaving
    def submit(self, owner: str = "") -> Ticket:
        """Join the line; QueueFull at once when it would have to wait and ``max_waiting``
        requests already wait."""
        with self._cond:
            if self._next() is not None and self._waiting() >= self.max_waiting:
                raise QueueFull(f"busy: the model is answering and {self._waiting()} requests are already "
                                f"waiting (at most {self.max_waiting})")
            ticket = Ticket(owner=owner, enqueued=self._clock())
            self._line.append(ticket)
            self._cond.notify_all()
            return ticket

    def release(self, ticket: Ticket) -> None:
        """Leave the line (after the turn, or instead of it). Safe to call twice."""
        with self._cond:
            if not ticket.released:
                ticket.released = True
                self._line.remove(ticket)
                self._cond.notify_all()

    def cancel(self, owner: str) -> int:
        """Cancel every unreleased ticket of ``owner`` (waiting or running); returns how many."""
        with self._cond:
            mine = [t for t in self._line if t.owner == owner]
            for t in mine:
                t.cancel.set()
            self._cond.notify_all()
            return len(mine)

    def cancel_all(self) -> int:
        """Cancel every unreleased ticket (the server stops); returns how many."""
        with self._cond:
            for t in self._line:
                t.cancel.set()
            self._cond.notify_all()
            return len(self._line)

    def wait_empty(self, timeout: float) -> bool:
        """Block until every ticket is released, the running one and the waiting ones (True), or
        ``timeout`` passes (False)."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._line, timeout)

    # ------------------------------------------------------------ waiting
    def wait_turn(self, ticket: Ticket, timeout: float | None = None) -> bool:
        """Block until ``ticket``'s turn starts (True), it is cancelled, or ``timeout`` passes (False)."""
        deadline = None if timeout is None else self._clock() + timeout
        with self._cond:
            while True:
                if ticket.started is not None:
                    return True
                if ticket.cancelled or ticket.released:
                    return False
                if self._next() is ticket:
                    ticket.started = self._clock()
                    return True
                remaining = None if deadline is None else deadline - self._clock()
                if remaining is not None and remaining <= 0:
                    return False
                # a cancel sets the event without always holding the lock: wake up now and then
                self._cond.wait(0.25 if remaining is None else min(remaining, 0.25))

    def position(self, ticket: Ticket) -> int:
        """Place in line, 1 = running (or next to run); 0 when released or cancelled before its turn."""
        with self._cond:
            active = [t for t in self._line if t.started is not None or not t.cancelled]
            return active.index(ticket) + 1 if ticket in active else 0

    @contextmanager
    def turn(self, owner: str = "", timeout: float | None = None) -> Iterator[Ticket]:
        """``with queue.turn():`` for short blocking work (a model swap). Raises QueueFull, or
        Cancelled / TimeoutError when the turn never came."""
        ticket = self.submit(owner)
        try:
            if not self.wait_turn(ticket, timeout):
                raise Cancelled("cancelled while waiting") if ticket.cancelled else TimeoutError(
                    f"the model stayed busy for {timeout} s")
            yield ticket
        finally:
            self.release(ticket)

    # ------------------------------------------------------------ state
    @property
    def busy(self) -> bool:
        with self._cond:
            return any(t.started is not None for t in self._line)

    def running_owner(self) -> str | None:
        """The owner of the ticket whose turn it is (None when nobody's is)."""
        with self._cond:
            return next((t.owner for t in self._line if t.started is not None), None)

    def waiting(self) -> int:
        with self._cond:
            return self._waiting()

    def _waiting(self) -> int:
        return sum(1 for t in self._line if t.started is None and not t.cancelled)

    def _next(self) -> Ticket | None:
        """The ticket that runs now or runs next: the started one, else the first uncancelled one."""
        for t in self._line:
            if t.started is not None:
                return t
        for t in self._line:
            if not t.cancelled:
                return t
        return None


class GenerationThread:
    """One long-lived thread that runs jobs one after another: where a process computes its answers.

    llama.cpp computes with OpenMP, whose team of worker threads belongs to the thread that calls
    it and lives as long as that thread. A thread per answer started a thread, and later a team,
    before every prefill (measured in the API server on 2 cores: 0.2-4 ms from the request to its
    thread's first line, ~0.15 ms for a thread already waiting). Several long-lived computing
    threads are worse: once libgomp manages more threads than there are cores it stops spinning
    at its barriers, for every team (measured on 2 cores: one idle extra team took decoding from
    6.7 to 9.4-11.7 ms per token; a generation stepped on a pool's threads while the main thread's
    team lived on ran at 58-76 instead of 140-156 tokens/s). Hence one thread for the UI, the API
    and the MCP tools of a process.

        generation = GenerationThread()
        generation.submit(job)             # job() runs on the thread, after the jobs before it
        result = generation.call(fn)       # the same, waiting for fn's result (or its exception)
        for item in generation.iterate(it): ... # an iterator advanced on the thread, item by item

    The thread starts with the first job. A job reports its own errors; one that raises is logged
    and the thread goes on.
    """

    def __init__(self, name: str = "localrag-generation") -> None:
        self.name = name
        self._jobs: SimpleQueue[Callable[[], None]] = SimpleQueue()
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()

    def submit(self, job: Callable[[], None]) -> None:
        with self._start_lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name=self.name, daemon=True)
                self._thread.start()
        self._jobs.put(job)

    def call(self, fn: Callable[[], T]) -> T:
        if threading.current_thread() is self._thread:  # a job calling in: waiting for itself would never end
            return fn()
        future: Future[T] = Future()

        def job() -> None:
            try:
                future.set_result(fn())
            except BaseException as exc:  # handed to the caller, which raises it
                future.set_exception(exc)

        self.submit(job)
        return future.result()

    def iterate(self, items: Generator[T, None, None]) -> Iterator[T]:
        """``items``, each one computed on the thread (for a generator a server steps from
        whichever worker thread it likes, as Gradio does); closing this closes ``items`` there."""
        sentinel = object()
        try:
            while (item := self.call(lambda: next(items, sentinel))) is not sentinel:
                yield item
        finally:
            self.call(items.close)

    def _serve(self) -> None:
        while True:
            job = self._jobs.get()
            try:
                job()
            except Exception:
                log.exception("a generation job failed")


def ordinal(n: int) -> str:
    """1st, 2nd, 3rd, 4th, ..., 11th, 12th, 13th, 21st."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"
