"""``run`` with threads interrupted while it waits for its handlers (a second Ctrl-C,
``sys.exit`` in a signal handler): the consumer can still be closed (``harness``)."""

from __future__ import annotations

import threading

import pytest

from streamplane.client.consumer import StreamMessage
from tests.unit.client.harness import KEY
from tests.unit.client.test_close_hand_out import closable_consumer_of
from tests.waiting import wait_for


def test_a_run_interrupted_while_it_waits_for_its_handlers_can_still_be_closed() -> None:
    """``_drain_pool`` runs first in ``_run_pool``'s ``finally``, before ``_run_closes``
    and ``_run_thread`` are reset. Anything raised while it waits (a second Ctrl-C, a
    SIGTERM handler that calls ``sys.exit`` once ``stop`` did not end things fast
    enough, an error from housekeeping) skips that reset: ``close`` on that thread
    (``with``'s exit) then only *requests* a close that nobody completes: nothing is
    committed, the group is not left, the Kafka clients and the committer's, watch's
    and heartbeat's threads stay. The code before kept the reset (its pool's join was
    inside the ``try``)."""
    c, commits = closable_consumer_of(20)
    c.commit_interval_s = 3600  # only the closing commit
    stall = threading.Event()
    stop = threading.Event()
    started: list[int] = []
    keep_house = c._keep_house

    def interrupted_keep_house() -> None:
        if stop.is_set():  # the KeyboardInterrupt lands in the drain's wait
            raise KeyboardInterrupt
        keep_house()

    c._keep_house = interrupted_keep_house  # type: ignore[method-assign]

    def handler(msg: StreamMessage) -> None:
        started.append(msg.offset)
        if msg.offset == 3:  # 0, 1 and 2 are acked by then
            wait_for("acks", lambda: c._states[KEY].acks or c._states[KEY].base == 3, 10)
            stop.set()
            stall.wait(10)

    try:
        with pytest.raises(KeyboardInterrupt):
            c.run(handler, concurrency=2, stop=stop)
        c.close()  # what ``with StreamConsumer(...)`` does on its way out
        assert c._torn_down, "close() on the run's thread only requested a close"
        assert commits.committed, "nothing committed"
        (*_, (_, _, progress)) = commits.committed
        assert progress.low_watermark >= 3, "0-2 not committed"
    finally:
        stall.set()
    wait_for("threads", lambda: threading.active_count() < 50, 10)
