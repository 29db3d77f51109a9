"""``close`` called on the thread that polls, while it polls (``StreamConsumer`` over
``harness``): what a SIGTERM handler does, as it runs on the main thread between two
steps of the poll.

Found by an exploratory run (an application following docs/client.md): ``close()``
from a SIGTERM handler hung for good, during ``run`` and during an iteration, as the
main thread already held the poll's lock and close waited for it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from tests.unit.client.test_close_hand_out import closable_consumer_of

ROOT = Path(__file__).resolve().parents[3]  # holds ``tests``


@pytest.mark.parametrize("how", ["iterate", "run"])
def test_close_called_inside_the_poll_ends_the_loop_and_commits(how: str) -> None:
    """The stand-in's fetch (inside the poll, holding its lock) calls ``close``, as a
    signal handler would: the poll returns, the iteration ends (``run`` returns), and
    the closing commit holds every record handled, those ``run``'s threads held
    included (the tasks queued for them are not started)."""
    c, commits = closable_consumer_of(100)
    closing: list[bool] = []

    def fetch(timeout: float) -> None:
        if not closing and not c._buffers[0].size:  # all is handed out: the stream is idle
            closing.append(True)
            c.close()

    c._fetch = fetch  # type: ignore[method-assign]
    handled: list[int] = []
    errors: list[BaseException] = []

    def consume() -> None:
        try:
            if how == "iterate":
                for msg in c:
                    handled.append(msg.offset)
                    msg.ack()
            else:
                c.run(lambda msg: handled.append(msg.offset), concurrency=4)
        except BaseException as exc:
            errors.append(exc)

    consumer = threading.Thread(target=consume, daemon=True)
    consumer.start()
    consumer.join(20)  # a hang guard: before, it never returned
    assert not consumer.is_alive(), "close() from the polling thread hung"
    assert not errors, errors
    assert closing and c._closed
    (*_, (_, _, progress)) = commits.committed
    if how == "iterate":
        assert sorted(handled) == list(range(100))
        assert progress.low_watermark == 100
    else:
        # ``run`` handles what its threads hold, not the tasks still queued for them
        # (at most ``concurrency``, left unsettled for the next reader): the commit
        # holds every record handled below the first one left.
        assert len(handled) == len(set(handled)) >= 100 - 4
        left = sorted(set(range(100)) - set(handled))
        assert progress.low_watermark == (left[0] if left else 100)


_CHILD = textwrap.dedent(
    """
    import json, os, signal, sys, time
    from tests.unit.client.test_close_hand_out import closable_consumer_of

    c, commits = closable_consumer_of(100)
    signal.signal(signal.SIGTERM, lambda *_: c.close())
    sent = []

    def fetch(timeout):  # the stream is idle: SIGTERM comes while the poll waits
        if not sent and not c._buffers[0].size:
            sent.append(True)
            os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(timeout)

    c._fetch = fetch
    handled = []

    def slow(msg):  # SIGTERM comes while run waits for a free place, or polls
        time.sleep(0.01)
        if msg.offset == 50:
            os.kill(os.getpid(), signal.SIGTERM)
        handled.append(msg.offset)

    if sys.argv[1] == "iterate":
        for msg in c:
            handled.append(msg.offset)
            msg.ack()
    elif sys.argv[1] == "run":
        c.run(lambda msg: handled.append(msg.offset), concurrency=4)
    else:
        c.run(slow, concurrency=4)
    print(json.dumps({
        "handled": len(handled),
        "closed": c._closed,
        "committed": commits.committed[-1][2].low_watermark,
    }))
    """
)


@pytest.mark.parametrize("how", ["iterate", "run", "run-busy"])
def test_a_sigterm_handler_that_closes_ends_the_process_cleanly(how: str) -> None:
    """A real SIGTERM, to a process consuming on its main thread, whose handler calls
    ``close()``: the process finishes with everything it handled committed (before, it
    hung). ``run-busy``: SIGTERM comes mid-stream, while run's threads are busy: run
    returns once they are done, their acks in the closing commit."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    try:
        done = subprocess.run(
            [sys.executable, "-c", _CHILD, how],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,  # a hang guard
        )
    except subprocess.TimeoutExpired:
        pytest.fail("close() from the SIGTERM handler hung")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if how == "run-busy":
        assert 50 < result["handled"] < 100
        assert result["committed"] == result["handled"]
        assert result["closed"]
    else:
        assert result == {"handled": 100, "closed": True, "committed": 100}
