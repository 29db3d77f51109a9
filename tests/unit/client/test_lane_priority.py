"""Lanes are handed out by priority inside a StreamConsumer, without Kafka (``harness``):
the order does not depend on which partitions' fetches answer first."""

from __future__ import annotations

from confluent_kafka import Message

from streamplane.client.consumer import StreamConsumer, _LaneBuffer
from streamplane.client.partition_state import PartitionKey, PartitionState
from tests.unit.client.harness import DlqBroker, stand_in_consumer

REALTIME = PartitionKey("local-a", "sp.s.realtime.e1", 0)
BULK = PartitionKey("local-a", "sp.s.bulk.e1", 0)


def two_lanes() -> StreamConsumer:
    c = stand_in_consumer(DlqBroker(), partitions=0)
    c._lanes, c._lane_order = ["realtime", "bulk"], {"realtime": 0, "bulk": 1}
    c._buffers = [_LaneBuffer(), _LaneBuffer()]
    for key, lane, priority in ((REALTIME, "realtime", 0), (BULK, "bulk", 1)):
        state = PartitionState(key, lane, priority)
        state.restore(None, 0)
        c._states[key] = state
        c._states_by_cluster.setdefault(key.cluster, {})[(key.topic, key.partition)] = state
    return c


def fetch(key: PartitionKey, first: int, n: int) -> list[Message]:
    return [
        Message(
            topic=key.topic, partition=key.partition, offset=o, value=b"%d" % o, timestamp=(1, o)
        )
        for o in range(first, first + n)
    ]


def test_realtime_records_fetched_with_bulk_ones_are_handed_out_first() -> None:
    c = two_lanes()
    c._accept("local-a", fetch(BULK, 0, 5) + fetch(REALTIME, 0, 3))
    assert [m.lane for m in c.poll_batch(100, 0)] == ["realtime"] * 3 + ["bulk"] * 5


def test_realtime_records_fetched_later_overtake_the_bulk_ones_still_buffered() -> None:
    c = two_lanes()
    c._accept("local-a", fetch(BULK, 0, 6))
    assert [m.offset for m in c.poll_batch(2, 0)] == [0, 1]  # bulk: nothing else buffered
    c._accept("local-a", fetch(REALTIME, 0, 3))
    out = c.poll_batch(100, 0)
    assert [(m.lane, m.offset) for m in out] == [("realtime", o) for o in range(3)] + [
        ("bulk", o) for o in range(2, 6)
    ]
