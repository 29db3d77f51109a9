"""The load a member reports to the Assigner: smoothed, not one heartbeat's window."""

from __future__ import annotations

from types import SimpleNamespace

from streamplane.client.membership import CpuMeter
from tests.unit.client.harness import KEY, Clock, DlqBroker, stand_in_consumer


class _SteadyCpu(CpuMeter):
    """A CPU meter that always reads 5% of the cores."""

    def __call__(self) -> float:
        return 0.05


def test_bursty_fetches_report_a_steady_rate(clock: Clock) -> None:
    """A unit fetched 250 records every 2.5 s (100 records/s) read 0 in most 0.3 s
    heartbeats and ~830 records/s in the others; smoothed, it reads ~100 after a few
    seconds and stays within a factor of two of it."""
    c = stand_in_consumer(DlqBroker())
    c._membership = SimpleNamespace()  # type: ignore[assignment]
    c._cpu_meter = _SteadyCpu()
    state = c._states[KEY]
    c._last_load = (clock.now, 0)
    reported = []
    for beat in range(200):  # 60 s of heartbeats
        if beat % 8 == 0:  # 250 records every 2.4 s: ~104 records/s
            state.fetched += 250
            c.stats["delivered"] += 250
        clock.now += 0.3
        cpu, rate, units = c._load_report()
        reported.append((rate, units[0]["throughput"], cpu))
    settled = reported[50:]  # after 15 s
    for rate, throughput, cpu in settled:
        assert 50 < rate < 210 and 50 < throughput < 210
        assert cpu == 0.05
    mean = sum(t for _, t, _ in settled) / len(settled)
    assert 90 < mean < 120
