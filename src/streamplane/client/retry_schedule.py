"""Records waiting out a retry backoff, released once due.

A nacked record waits ``retry_backoff * 2 ** (attempt - 1)`` (capped): every record on
its n-th attempt waits the same delay, so there are only a handful of distinct delays.
``RetrySchedule`` keeps one FIFO queue per delay; since the clock only moves forward,
each queue is in due order by construction. Items are scheduled and released in
*batches* (the records nacked together with the same delay and lane): scheduling and
releasing a batch is a deque append and popleft, whatever its size and however many
records wait (a burst of poison pills can hold thousands). No heap, no per-record
entry.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class RetrySchedule(Generic[T]):
    __slots__ = ("_count", "_queues")

    def __init__(self) -> None:
        self._queues: dict[float, deque[tuple[float, list[T]]]] = {}
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def add(self, batch: list[T], delay: float, now: float) -> None:
        """Release ``batch`` (as one list) at ``now + delay`` (``now`` from a monotonic
        clock). The schedule owns the list from now on."""
        queue = self._queues.get(delay)
        if queue is None:
            queue = self._queues[delay] = deque()
        queue.append((now + delay, batch))
        self._count += len(batch)

    def pop_due(self, now: float) -> list[list[T]]:
        """Every batch due at ``now``, each queue's in the order they were added."""
        due: list[list[T]] = []
        for queue in self._queues.values():
            while queue and queue[0][0] <= now:
                due.append(queue.popleft()[1])
        for batch in due:
            self._count -= len(batch)
        return due

    def discard(self, drop: Callable[[T], bool]) -> int:
        """Forget the waiting items ``drop`` is true for; how many were dropped."""
        dropped = 0
        for delay, queue in self._queues.items():
            kept: deque[tuple[float, list[T]]] = deque()
            for due, batch in queue:
                rest = [item for item in batch if not drop(item)]
                dropped += len(batch) - len(rest)
                if rest:
                    kept.append((due, rest))
            self._queues[delay] = kept
        self._count -= dropped
        return dropped
