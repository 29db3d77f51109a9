"""Client counters read from live consumers never go down when a consumer closes or
gives a partition up."""

from __future__ import annotations

from dataclasses import dataclass, field

from streamplane.client.metrics import ClientMetrics
from streamplane.client.partition_state import PartitionKey, PartitionState


@dataclass
class Consumer:
    stream: str = "s"
    group: str = "g"
    stats: dict[str, int] = field(default_factory=dict)
    _states: dict[PartitionKey, PartitionState] = field(default_factory=dict)

    def __hash__(self) -> int:
        return id(self)

    def fetch(self, partition: int, n: int) -> PartitionState:
        key = PartitionKey("local-a", "sp.s.realtime.e1", partition)
        state = self._states.setdefault(key, PartitionState(key, "realtime", 0))
        state.fetched += n
        return state


def test_a_closed_consumer_s_counts_stay_and_are_not_counted_twice() -> None:
    metrics = ClientMetrics()
    c = Consumer(stats={"acked": 7, "dlq": 1})
    metrics.track_consumer(c)
    c.fetch(0, 5)
    c.fetch(1, 3)
    before = (metrics.consumed_counts(), metrics.handled())

    metrics.untrack_consumer(c)
    metrics.untrack_consumer(c)  # a second close counts nothing again
    assert (metrics.consumed_counts(), metrics.handled()) == before
    c.fetch(0, 100)  # a closed consumer is not read any more
    del c
    assert metrics.consumed_counts()[("s", "local-a", "sp.s.realtime.e1", 0)] == 5
    assert metrics.handled()[("s", "g", "acked")] == 7


def test_a_partition_given_up_keeps_what_it_fetched() -> None:
    metrics = ClientMetrics()
    c = Consumer()
    metrics.track_consumer(c)
    c.fetch(0, 5)
    gone = c._states.pop(PartitionKey("local-a", "sp.s.realtime.e1", 0))
    metrics.partitions_released(c, [gone])
    c.fetch(0, 2)  # taken again later: a new state counts from 0
    assert metrics.consumed_counts() == {("s", "local-a", "sp.s.realtime.e1", 0): 7}
