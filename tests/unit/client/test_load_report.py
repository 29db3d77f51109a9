"""The load a member reports to the Assigner: smoothed, not one heartbeat's window; its
records/s counts the records handled successfully, its units' throughput what is fetched."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from confluent_kafka import Message

from streamplane.client.consumer import StreamConsumer
from streamplane.client.membership import CpuMeter
from tests.unit.client.harness import KEY, Clock, DlqBroker, stand_in_consumer


class _SteadyCpu(CpuMeter):
    """A CPU meter that always reads 5% of the cores."""

    def __call__(self) -> float:
        return 0.05


def reporting(c: StreamConsumer, clock: Clock) -> StreamConsumer:
    """``c`` with its load report starting now."""
    c._cpu_meter = _SteadyCpu()
    c._last_load = (clock.now, 0)
    return c


def report(c: StreamConsumer) -> tuple[float, float, list[dict[str, Any]]]:
    """The load report of ``c`` as a member of a group (which it is only for the call:
    polling would ask the membership for its lease)."""
    c._membership = SimpleNamespace()  # type: ignore[assignment]
    try:
        return c._load_report()
    finally:
        c._membership = None


def test_bursty_fetches_report_a_steady_rate(clock: Clock) -> None:
    """A unit fetched 250 records every 2.5 s (100 records/s) read 0 in most 0.3 s
    heartbeats and ~830 records/s in the others; smoothed, it reads ~100 after a few
    seconds and stays within a factor of two of it."""
    c = reporting(stand_in_consumer(DlqBroker()), clock)
    state = c._states[KEY]
    reported = []
    for beat in range(200):  # 60 s of heartbeats
        if beat % 8 == 0:  # 250 records every 2.4 s: ~104 records/s, all handled
            state.fetched += 250
            c.stats["acked"] += 250
        clock.now += 0.3
        cpu, rate, units = report(c)
        reported.append((rate, units[0]["throughput"], cpu))
    settled = reported[50:]  # after 15 s
    for rate, throughput, cpu in settled:
        assert 50 < rate < 210 and 50 < throughput < 210
        assert cpu == 0.05
    mean = sum(t for _, t, _ in settled) / len(settled)
    assert 90 < mean < 120


def handle_for(c: StreamConsumer, clock: Clock, seconds: float, ok: bool) -> None:
    """30 records fetched every 0.3 s (100 records/s), each handed out (again, when
    retried) and acked, or nacked (a handler that fails everything); a load report at
    every step."""
    offset = 0
    for _ in range(int(seconds / 0.3)):
        fetch = [
            Message(topic=KEY.topic, partition=0, offset=o, value=b"x", timestamp=(1, o))
            for o in range(offset, offset + 30)
        ]
        offset += 30
        c._accept(KEY.cluster, fetch)
        for msg in c.poll_batch(1000, 0):
            msg.ack() if ok else msg.nack("database down")
        clock.now += 0.3
        report(c)


def test_a_member_whose_handler_fails_everything_reports_nothing_handled(clock: Clock) -> None:
    """Its rate counted records handed out, every attempt and retry: it read as the
    fastest member of the group (here ~200 records/s) and kept its units."""
    c = reporting(stand_in_consumer(DlqBroker(ack_at_poll=True)), clock)
    handle_for(c, clock, 20.0, ok=False)
    _cpu, rate, units = report(c)
    assert c.stats["delivered"] > 1.5 * 30 * (20.0 / 0.3)  # every record twice, or more
    assert c.stats["dlq"] > 0 and c.stats["acked"] == 0
    assert rate == 0.0
    # What it reads of its unit is the unit's offered load, whatever becomes of it.
    assert 90.0 < units[0]["throughput"] < 110.0


def test_a_healthy_member_reports_what_it_reads(clock: Clock) -> None:
    c = reporting(stand_in_consumer(DlqBroker(ack_at_poll=True)), clock)
    handle_for(c, clock, 20.0, ok=True)
    _cpu, rate, units = report(c)
    assert 90.0 < rate < 110.0 and 90.0 < units[0]["throughput"] < 110.0


def test_a_new_units_catch_up_does_not_read_as_its_rate(clock: Clock) -> None:
    """A unit that has just changed hands: its first fetch holds what waited while it
    moved (here 2 s of a 100 records/s unit). Taken as the first reading, it said ~670
    records/s and inflated the unit's weight for ~15 s after the hand-over."""
    c = reporting(stand_in_consumer(DlqBroker()), clock)
    state = c._states[KEY]
    state.fetched += 200
    clock.now += 0.3
    _cpu, _rate, units = report(c)
    assert units[0]["throughput"] < 100.0
