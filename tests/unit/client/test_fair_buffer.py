"""A lane's buffer is shared by its partitions once it is half full: a partition
holding more than its share waits while the others' records come in.

Found by an exploratory run: one member handling ~50 records/s, a backlog of ~11,000
records on each of 4 partitions: it read p3 alone for ~160 s, then p2 alone, then p1;
p0 had no record for 5.5 minutes (every slot that freed up in the lane's buffer went to
the partition at the head of the fetched records)."""

from __future__ import annotations

from confluent_kafka import Message, TopicPartition

from streamplane.client.consumer import StreamConsumer
from tests.unit.client.harness import KEY, DlqBroker, stand_in_consumer


class Fetcher:
    """The fetching client's pause and resume calls, as partition numbers."""

    def __init__(self) -> None:
        self.paused: set[int] = set()

    def pause(self, partitions: list[TopicPartition]) -> None:
        self.paused |= {tp.partition for tp in partitions}

    def resume(self, partitions: list[TopicPartition]) -> None:
        self.paused -= {tp.partition for tp in partitions}


def backlog_of_p3(records: int) -> tuple[StreamConsumer, Fetcher]:
    c = stand_in_consumer(DlqBroker(), partitions=4)
    c.max_buffered_per_lane = 400
    fetcher = Fetcher()
    c._consumers = {("local-a", 0): fetcher}  # type: ignore[dict-item]
    fetch = [
        Message(topic=KEY.topic, partition=3, offset=o, value=b"%d" % o, timestamp=(1, o))
        for o in range(records)
    ]
    c._accept(KEY.cluster, fetch)
    return c, fetcher


def test_a_partition_over_its_share_waits_while_the_others_read() -> None:
    c, fetcher = backlog_of_p3(400)
    c._flow_control()
    assert fetcher.paused == {0, 1, 2, 3}  # the lane's buffer is full
    for msg in c.poll_batch(150, 0):
        msg.ack()
    c._flow_control()
    # 250 of 400 buffered: p3 holds all of them, over its share (100): it waits, and
    # the others read (before: all four resumed, and p3's next run took the slots).
    assert fetcher.paused == {3}


def test_below_half_full_every_partition_reads() -> None:
    c, fetcher = backlog_of_p3(150)
    c._flow_control()
    assert fetcher.paused == set()  # 150 buffered of 400: no sharing yet
