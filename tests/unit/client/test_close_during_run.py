"""``close`` from another thread, or from a handler, while ``run`` hands records to
threads (``StreamConsumer`` over ``harness``): the records its threads started are
handled and their acks are in the closing commit.

Found by a review of the hand-over: ``close`` from another thread took the poll's lock
between two of ``run``'s polls, committed and left the group while handlers still ran:
their acks came after the closing commit (lost: the records handled again after a
restart), and the group moved their units on at once, while they were handled."""

from __future__ import annotations

import threading

from streamplane.client.consumer import StreamMessage
from tests.unit.client.harness import KEY
from tests.unit.client.test_close_hand_out import closable_consumer_of
from tests.waiting import wait_for


def test_close_from_another_thread_waits_for_the_handlers_run_started() -> None:
    c, commits = closable_consumer_of(3)
    c.commit_interval_s = 3600  # only the closing commit
    slow = threading.Event()  # the handler of offset 0 waits for its downstream
    events: list[str] = []

    def handler(msg: StreamMessage) -> None:
        if msg.offset == 0:
            slow.wait(10)
            events.append("handler of offset 0 returned")

    runner = threading.Thread(target=c.run, args=(handler,), kwargs={"concurrency": 2})
    runner.start()
    state = c._states[KEY]
    wait_for("offsets 1 and 2 acked", lambda: len(state.acks) + state.acked >= 2, 10)

    def close() -> None:
        c.close()
        events.append("close returned")

    closer = threading.Thread(target=close)
    try:
        closer.start()
        wait_for("close to act", lambda: c._close_requested or c._torn_down, 10)
        assert not c._torn_down and not commits.committed  # waits for offset 0
    finally:
        slow.set()
        closer.join(10)
        runner.join(10)
    assert not closer.is_alive() and not runner.is_alive()
    assert events == ["handler of offset 0 returned", "close returned"]
    assert c._torn_down
    (*_, (_, _, last)) = commits.committed
    assert last.low_watermark == 3  # offset 0's ack is in the closing commit


def test_close_in_a_handler_of_a_run_with_threads_is_completed_by_run() -> None:
    """It returns at once (waiting for ``run`` to finish, it would wait for itself), and
    ``run`` completes the close once its threads are done: that handler's ack is in the
    closing commit."""
    c, commits = closable_consumer_of(10)
    c.commit_interval_s = 3600
    events: list[str] = []

    def handler(msg: StreamMessage) -> None:
        if msg.offset == 5:
            c.close()
            events.append("close returned")

    runner = threading.Thread(target=c.run, args=(handler,), kwargs={"concurrency": 2})
    runner.start()
    runner.join(10)
    assert not runner.is_alive()
    assert events == ["close returned"] and c._torn_down
    (*_, (_, _, last)) = commits.committed
    assert last.low_watermark >= 6  # offset 5 acked after its handler's close returned
