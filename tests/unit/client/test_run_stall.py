"""``run`` with threads while its downstream stalls (``harness``, no Kafka).

The exploratory run these reproduce: a service's handlers all stalled on a downstream
(12 s) when the pod got SIGTERM. The poll thread sat in its wait for a free thread, so
nothing was committed for 32 s (the acks of records handled seconds before the stop
included), and after the stop the pool still started the 8 records queued for it, each
at the stalled downstream's pace: the pod's SIGKILL came first and every record handled
since the stop was handled again."""

from __future__ import annotations

import threading
import time

from streamplane.client.consumer import StreamMessage
from tests.unit.client.harness import DlqBroker, consumer_of
from tests.waiting import wait_for


def _run_in_background(target: object, **kwargs: object) -> threading.Thread:
    thread = threading.Thread(target=target, kwargs=kwargs, daemon=True)  # type: ignore[arg-type]
    thread.start()
    return thread


def test_a_stopped_run_starts_none_of_the_records_queued_for_its_threads() -> None:
    c, state = consumer_of(20, DlqBroker())
    stall = threading.Event()
    stop = threading.Event()
    started: list[int] = []

    def handler(msg: StreamMessage) -> None:
        started.append(msg.offset)
        stall.wait()

    runner = _run_in_background(c.run, handler=handler, concurrency=2, stop=stop)
    wait_for("both threads stalled", lambda: len(started) == 2, 10)
    time.sleep(0.5)  # the poll thread queues 2 more tasks, then waits for a place
    stop.set()
    time.sleep(0.5)  # the run sees the stop while every handler is stalled
    stall.set()
    runner.join(10)
    assert not runner.is_alive()
    assert sorted(started) == [0, 1]  # the old code started 2 and 3 after the stop
    c._apply_acks()
    assert state.unsettled() == 18
    # The records not started are put back, unsettled, in order.
    assert [m.offset for m in c.poll_batch(100, 0)] == list(range(2, 20))


def test_acks_are_committed_while_every_handler_thread_is_stalled() -> None:
    c, state = consumer_of(20, DlqBroker())
    c.commit_interval_s = 0.1
    stall = threading.Event()
    stop = threading.Event()
    stalled: list[int] = []
    commits: list[float] = []
    commit = c._commit

    def spy(wait: bool) -> None:
        commits.append(time.monotonic())
        commit(wait)

    c._commit = spy  # type: ignore[method-assign]

    def handler(msg: StreamMessage) -> None:
        if msg.offset >= 5:  # the downstream stalls from the sixth record on
            stalled.append(msg.offset)
            stall.wait()

    runner = _run_in_background(c.run, handler=handler, concurrency=2, stop=stop)
    wait_for("both threads stalled", lambda: len(stalled) == 2, 10)
    stalled_at = time.monotonic()
    wait_for("a commit during the stall", lambda: any(t > stalled_at + 0.2 for t in commits), 10)
    # The five records acked before the stall are committed (the low watermark moved
    # past them) while the run still waits: the old code committed nothing until a
    # place freed up.
    assert state.base == 5
    stop.set()
    stall.set()
    runner.join(10)
    assert not runner.is_alive()
