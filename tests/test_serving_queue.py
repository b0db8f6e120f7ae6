"""GenerationQueue with real threads: order, bound, per-request cancel, positions, measured wait;
GenerationThread: one thread, jobs in order, results and errors handed back, iterators stepped there."""

from __future__ import annotations

import threading
import time

import pytest

from localrag.app.serving import Cancelled, GenerationQueue, GenerationThread, QueueFull, ordinal


def run_in_thread(fn):
    out: dict = {}
    th = threading.Thread(target=lambda: out.setdefault("value", fn()), daemon=True)
    th.start()
    return th, out


def test_turns_are_fifo_and_one_at_a_time():
    q = GenerationQueue(max_waiting=10)
    order: list[int] = []
    running = 0
    overlap = []
    lock = threading.Lock()
    first = q.submit("first")
    assert q.wait_turn(first, timeout=1)

    def worker(i: int, ticket):
        nonlocal running
        assert q.wait_turn(ticket, timeout=10)
        with lock:
            running += 1
            overlap.append(running)
            order.append(i)
        time.sleep(0.01)
        with lock:
            running -= 1
        q.release(ticket)

    tickets = [q.submit(f"t{i}") for i in range(5)]  # submitted in this order while "first" runs
    threads = [threading.Thread(target=worker, args=(i, t)) for i, t in reversed(list(enumerate(tickets)))]
    for th in threads:
        th.start()
    time.sleep(0.1)
    assert order == []  # nobody passes the running ticket
    q.release(first)
    for th in threads:
        th.join(10)
    assert order == [0, 1, 2, 3, 4]
    assert max(overlap) == 1


def test_bound_refuses_at_once():
    q = GenerationQueue(max_waiting=2)
    running = q.submit("a")
    assert q.wait_turn(running, timeout=1)
    q.submit("b")
    q.submit("c")

    def refused() -> bool:
        with pytest.raises(QueueFull, match="2 requests are already waiting"):
            q.submit("d")
        return True

    th, got = run_in_thread(refused)  # "a" never releases: a submit that waited for room never returns
    th.join(60)
    assert not th.is_alive(), "submit was still waiting for room after 60 s instead of refusing"
    assert got.get("value") and q.waiting() == 2 and q.busy


def test_a_line_with_no_room_to_wait_still_serves_an_idle_model():
    q = GenerationQueue(max_waiting=0)
    a = q.submit("a")  # nobody running: it runs at once
    assert q.wait_turn(a, timeout=0)
    with pytest.raises(QueueFull, match="at most 0"):
        q.submit("b")
    q.release(a)
    assert q.wait_turn(q.submit("c"), timeout=0)


def test_cancel_is_per_owner_and_frees_the_line():
    q = GenerationQueue(max_waiting=4)
    a = q.submit("tab-a")
    assert q.wait_turn(a, timeout=1)
    b = q.submit("tab-b")
    c = q.submit("tab-c")
    th, got = run_in_thread(lambda: q.wait_turn(b, timeout=10))
    assert q.cancel("tab-b") == 1
    th.join(5)
    assert got["value"] is False and b.cancelled
    assert not a.cancelled and not c.cancelled  # Stop in tab B leaves A running and C waiting
    assert q.position(c) == 2  # b no longer counts, even before its owner releases it
    q.release(a)
    assert q.wait_turn(c, timeout=1)  # b, cancelled but not yet released, does not hold up c
    q.release(b)
    q.release(c)
    assert q.position(c) == 0


def test_cancelling_the_running_ticket_sets_its_flag_only():
    q = GenerationQueue()
    a = q.submit("x")
    assert q.wait_turn(a, timeout=1)
    b = q.submit("y")
    q.cancel("x")
    assert a.cancelled and not b.cancelled
    assert q.position(a) == 1  # still running until its owner stops and releases
    q.release(a)
    assert q.wait_turn(b, timeout=1)


def test_positions_and_measured_wait():
    clock = [100.0]
    q = GenerationQueue(clock=lambda: clock[0])
    a, b, c = q.submit("a"), q.submit("b"), q.submit("c")
    assert q.wait_turn(a, timeout=0)
    assert [q.position(t) for t in (a, b, c)] == [1, 2, 3]
    assert a.waited_s == 0.0
    clock[0] = 137.5
    q.release(a)
    assert q.wait_turn(b, timeout=0)
    assert b.waited_s == pytest.approx(37.5)
    assert q.position(c) == 2 and c.waited_s == 0.0


def test_wait_times_out_without_losing_the_place():
    q = GenerationQueue()
    a, b = q.submit("a"), q.submit("b")
    assert q.wait_turn(a, timeout=0)
    t0 = time.perf_counter()
    th, got = run_in_thread(lambda: q.wait_turn(b, timeout=0.2))
    th.join(60)
    assert not th.is_alive(), "wait_turn(timeout=0.2) was still waiting after 60 s"
    assert got["value"] is False and time.perf_counter() - t0 >= 0.19  # it waited its timeout, then gave up
    assert q.position(b) == 2
    q.release(a)
    assert q.wait_turn(b, timeout=0)


def test_turn_context_manager_releases_and_reports_cancel():
    q = GenerationQueue()
    with q.turn("swap") as t:
        assert q.busy and q.position(t) == 1
    assert not q.busy
    a = q.submit("a")
    q.wait_turn(a, timeout=0)
    th, got = run_in_thread(lambda: _turn_outcome(q))
    time.sleep(0.1)
    q.cancel("later")
    th.join(5)
    assert got["value"] == "cancelled"
    with pytest.raises(TimeoutError), q.turn("late", timeout=0.05):
        pass
    q.release(a)
    assert q.waiting() == 0


def _turn_outcome(q: GenerationQueue) -> str:
    try:
        with q.turn("later", timeout=10):
            return "ran"
    except Cancelled:
        return "cancelled"


def test_release_from_another_thread():
    q = GenerationQueue()
    a = q.submit("a")
    assert q.wait_turn(a, timeout=0)
    th = threading.Thread(target=q.release, args=(a,))
    th.start()
    th.join(5)
    b = q.submit("b")
    assert q.wait_turn(b, timeout=0)
    q.release(b)
    q.release(b)  # twice is harmless


def test_ordinals():
    assert [ordinal(n) for n in (1, 2, 3, 4, 11, 12, 13, 21, 22, 102, 111)] == [
        "1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd", "102nd", "111th"]


def test_generation_thread_runs_every_job_on_one_thread_in_order():
    generation = GenerationThread()
    ran: list[tuple[int, int]] = []
    done = threading.Event()
    for i in range(20):
        generation.submit(lambda i=i: ran.append((i, threading.get_ident())))
    generation.submit(done.set)
    assert done.wait(10)
    assert [i for i, _ in ran] == list(range(20))
    assert len({ident for _, ident in ran}) == 1 and ran[0][1] != threading.get_ident()


def test_generation_thread_hands_back_results_and_errors_and_outlives_a_failing_job():
    generation = GenerationThread()
    assert generation.call(lambda: 6 * 7) == 42
    with pytest.raises(ZeroDivisionError):
        generation.call(lambda: 1 / 0)
    generation.submit(lambda: 1 / 0)  # nobody waits for this one: logged, and the thread goes on
    assert generation.call(threading.get_ident) == generation.call(threading.get_ident) != threading.get_ident()


def test_generation_thread_steps_an_iterator_on_its_thread_and_closes_it_there():
    generation = GenerationThread()
    where: list[int] = []
    closed_on: list[int] = []

    def numbers():
        try:
            for i in range(5):
                where.append(threading.get_ident())
                yield i
        finally:
            closed_on.append(threading.get_ident())

    assert list(generation.iterate(numbers())) == [0, 1, 2, 3, 4]
    thread = generation.call(threading.get_ident)
    assert set(where) == {thread} and closed_on == [thread] != [threading.get_ident()]
    stepped = generation.iterate(numbers())
    assert next(stepped) == 0
    stepped.close()  # the consumer stops early: the generator is closed on the generation thread
    assert closed_on == [thread, thread]
    assert generation.call(lambda: generation.call(lambda: 7)) == 7  # a job calling in runs inline
