"""A partition whose in-flight window stays full with nothing settled is logged once.

Found by an exploratory run: a consumer that never acked stopped receiving records
(5,500 handed out, its partitions paused at ``max_in_flight``) without a word; only
``partition_states()`` showed ``paused=True``."""

from __future__ import annotations

import logging

import pytest

from tests.unit.client.harness import Clock, DlqBroker, consumer_of

WARNING = "handed out and none settled"


def stall_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if WARNING in r.getMessage()]


def test_a_full_window_with_nothing_settled_is_logged_once(
    clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "streamplane.client.consumer")
    c, state = consumer_of(50, DlqBroker())
    c.max_in_flight = 10
    held = c.poll_batch(100, 0)  # handed out, never settled
    assert len(held) == 50 and state.in_flight >= c.max_in_flight
    c._flow_control()
    assert state.paused
    clock.now += 59
    c._flow_control()
    assert stall_warnings(caplog) == []
    clock.now += 2
    c._flow_control()
    (message,) = stall_warnings(caplog)
    assert "sp.s.default.e1[0] on local-a: 50 records handed out" in message
    assert "for 61 s" in message
    clock.now += 120
    c._flow_control()
    assert len(stall_warnings(caplog)) == 1  # once a stall


def test_a_slow_handler_that_settles_is_not_a_stall(
    clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "streamplane.client.consumer")
    c, state = consumer_of(200, DlqBroker())
    c.max_in_flight = 10
    held = c.poll_batch(200, 0)
    for msg in held[:150]:  # one record settled every ~0.5 s: the window stays full
        clock.now += 0.5
        msg.ack()
        c._flow_control()
        assert state.in_flight >= c.max_in_flight
    assert stall_warnings(caplog) == []
    clock.now += 61  # then nothing more: a stall from the last ack on
    c._flow_control()
    assert len(stall_warnings(caplog)) == 1
