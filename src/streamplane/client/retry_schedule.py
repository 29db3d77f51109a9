"""Records waiting out a retry backoff, released once due.

A nacked record waits ``retry_backoff * 2 ** (attempt - 1)`` (capped): every record on
its n-th attempt waits the same delay, so there are only a handful of distinct delays.
``RetrySchedule`` keeps one FIFO queue per delay; since the clock only moves forward,
each queue is in due order by construction. Scheduling and releasing a retry is a
deque append and popleft: no heap, no tie-breaking counter, whatever the number of
records waiting (a burst of poison pills can hold thousands).
"""

from __future__ import annotations

from collections import deque
from typing import Generic, TypeVar

T = TypeVar("T")


class RetrySchedule(Generic[T]):
    __slots__ = ("_count", "_queues")

    def __init__(self) -> None:
        self._queues: dict[float, deque[tuple[float, T]]] = {}
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def add(self, item: T, delay: float, now: float) -> None:
        """Release ``item`` at ``now + delay`` (``now`` from a monotonic clock)."""
        queue = self._queues.get(delay)
        if queue is None:
            queue = self._queues[delay] = deque()
        queue.append((now + delay, item))
        self._count += 1

    def pop_due(self, now: float) -> list[T]:
        """Every item due at ``now``, each queue's in the order they were added."""
        due: list[T] = []
        for queue in self._queues.values():
            while queue and queue[0][0] <= now:
                due.append(queue.popleft()[1])
        self._count -= len(due)
        return due
