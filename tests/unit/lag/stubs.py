"""Stand-ins for the lag monitor's Kafka reads (end offsets, timestamps) and its clock,
for tests that drive a ``ClusterWorker`` without a broker."""

from __future__ import annotations

import time
from collections.abc import Iterable

T0_S = 1_700_000_000.0
INVALID = -1001  # librdkafka's answer for a partition whose leader did not reply


class Clock:
    def __init__(self) -> None:
        self.now = T0_S

    def __call__(self) -> float:
        return self.now


class StubEnds:
    """End offsets from ``ends``; the partitions in ``dead`` are led by a dead broker.

    ``fetch`` answers them -1001, as librdkafka's ListOffsets did at its request timeout
    (the batched call the poller made before); ``fetch_pass`` leaves them out with a
    reason, as ``LogEnds.fetch_pass`` does. ``delay_s``: how long each call takes."""

    def __init__(self, ends: dict[tuple[str, int], int], delay_s: float = 0.0) -> None:
        self.ends = ends
        self.dead: set[tuple[str, int]] = set()
        self.delay_s = delay_s
        self.failures: dict[tuple[str, int], str] = {}

    def fetch(
        self, partitions: Iterable[tuple[str, int]], timeout: float = 5.0, *, earliest: bool = False
    ) -> dict[tuple[str, int], int]:
        time.sleep(self.delay_s)
        return {
            tp: INVALID if tp in self.dead else (0 if earliest else self.ends[tp])
            for tp in partitions
            if tp in self.ends
        }

    def fetch_pass(
        self,
        ends: Iterable[tuple[str, int]],
        starts: Iterable[tuple[str, int]] = (),
        timeout: float = 2.0,
    ) -> tuple[dict[tuple[str, int], int], dict[tuple[str, int], int]]:
        time.sleep(self.delay_s)
        ends, starts = list(ends), list(starts)
        self.failures = {tp: "no answer from broker 2 within 2s" for tp in self.dead}
        live = [tp for tp in ends if tp in self.ends and tp not in self.dead]
        return {tp: self.ends[tp] for tp in live}, {
            tp: 0 for tp in starts if tp in self.ends and tp not in self.dead
        }

    def close(self) -> None:
        pass


class NoLookup:
    def lookup(self, wanted: object, timeout: float = 1.0) -> dict[tuple[str, int, int], int]:
        return {}

    def close(self) -> None:
        pass
