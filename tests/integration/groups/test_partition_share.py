"""A slow member reading a backlog on every partition makes progress on every one of
them early, not one partition at a time.

Found by an exploratory run: one member handling ~50 records/s, a backlog of ~11,000
records on each of 4 partitions; it read p3 alone for ~160 s, then p2 alone, then p1,
and p0 had no record handled for 5.5 minutes. The fetching client hands out what it
prefetched first in, first out, each partition's in runs of up to
``max.partition.fetch.bytes`` (1 MiB): thousands of one partition's records before any
of the next one's. Sharing the lane's buffer (tests/unit/client/test_fair_buffer.py)
did not change that here: the buffer is refilled a fetch at a time once nearly empty
(it held at most 248 records of its 5,000), so the records wait in the client's queue.
Partitions take turns in that queue (``StreamConsumer._take_turns``). On the code
before the turns, the first 1,500 records handled were all of one partition.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from itertools import groupby
from typing import Any

from confluent_kafka import TopicPartition

from streamplane.client.consumer import StreamConsumer, StreamMessage
from streamplane.client.producer import StreamProducer
from streamplane.kafka.clients import make_consumer

PARTITIONS = 4
RECORDS = 8_000  # ~2,000 a partition: more than the records examined, on each one
# A fetch of a partition (``max.partition.fetch.bytes``, 1 MiB) holds ~2,400 records of
# this size: reading one partition at a time, the records examined are all of one.
VALUE_BYTES = 400
# A slow member: it handles a fetch of ``fetch_batch`` (250) records in ~2.5 s or more,
# longer than a partition's turn (2 s): each turn is one fetch, the first one two (the
# fetching client's first statistics, which tell the others wait, come with its second).
HANDLER_S = 0.01
# The records examined: the first handled, ~16 s of handling (a first turn of two
# fetches, then one each: every partition has had a turn by record 1,250).
FIRST = 1_500
# Each partition's part of them: at least a quarter of an even share (93 of 375).
AT_LEAST = FIRST // PARTITIONS // 4


def backlogs(control_plane: Any, stream: str) -> dict[int, int]:
    """Records in each partition of the stream's one segment."""
    with control_plane.client() as cp:
        (seg,) = cp.routing(stream).readable(["realtime"])
        bootstrap = cp.cluster_bootstrap(seg.cluster)
    consumer = make_consumer(bootstrap, "sp-test-ends")
    try:
        out = {}
        for p in range(seg.partitions):
            low, high = consumer.get_watermark_offsets(TopicPartition(seg.topic, p), 10)
            out[p] = high - low
        return out
    finally:
        consumer.close()


def runs(partitions: list[int]) -> str:
    """The order partitions were handled in, as runs: "p3 x412, p1 x250, ..."."""
    return ", ".join(f"p{p} x{len(list(g))}" for p, g in groupby(partitions))


def test_a_slow_member_reads_every_partition_of_its_backlog_early(
    control_plane: Any, stream_factory: Any
) -> None:
    client = control_plane.client()
    stream = stream_factory(cluster="local-a", partitions=PARTITIONS, lanes=("realtime",))
    pad = b"x" * VALUE_BYTES
    with StreamProducer(stream, client) as producer:
        for i in range(RECORDS):
            producer.send(b"%d " % i + pad, key=b"%d" % i)
    backlog = backlogs(control_plane, stream)
    assert len(backlog) == PARTITIONS and min(backlog.values()) > FIRST, backlog

    handled: list[int] = []  # the partition of each record handled, in order
    first_at: list[float] = []
    stop = threading.Event()

    def handler(msg: StreamMessage) -> None:
        time.sleep(HANDLER_S)
        if not handled:
            first_at.append(time.monotonic())
        handled.append(msg.partition)
        if len(handled) >= FIRST:
            stop.set()

    hang_guard = threading.Timer(120, stop.set)  # not a bound: the counts are the test
    hang_guard.start()
    try:
        with StreamConsumer(stream, f"g-{uuid.uuid4().hex[:6]}", client) as consumer:
            consumer.run(handler, stop=stop)
            took = time.monotonic() - first_at[0] if first_at else 0.0
    finally:
        hang_guard.cancel()
    first = handled[:FIRST]
    counts = Counter(first)
    parts = {p: counts.get(p, 0) for p in range(PARTITIONS)}
    print(
        f"backlog by partition {backlog}; the first {len(first)} records handled "
        f"(in {took:.1f} s), by partition: {parts}; in order: {runs(first)}"
    )
    assert len(first) == FIRST, f"only {len(first)} records handled"
    assert min(parts.values()) >= AT_LEAST, (
        f"the first {FIRST} records handled, by partition: {parts} (each should have at "
        f"least {AT_LEAST}); in order: {runs(first)}"
    )
