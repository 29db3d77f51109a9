"""Records lost when an idempotent producer writes to a topic the moment it exists.

    .venv/bin/python bench/fresh_topic_writes.py [--topics 100] [--partitions 48]

Kafka's controller answers CreateTopics before the partitions' leaders have opened
them; for ~30-100 ms a leader answers NOT_LEADER_FOR_PARTITION. An idempotent
producer's first batch to such a partition could be acknowledged with no offset and
not written (Kafka 4.4, librdkafka 2.16). ``KafkaAdmin.create_topics`` therefore
returns a topic only once every partition's leader answers ListOffsets for it.

For each of ``--topics`` fresh topics, created either with the raw admin client (the
baseline: no wait) or with ``KafkaAdmin.create_topics`` (the wait), a producer that is
connected beforehand starts writing at once: eight records per partition, a round of
the partitions every 30 ms (~1,600 records/s; written in one burst, nothing was lost
either way); then every record is read back. It prints, for both ways, the records
acknowledged, those acknowledged with no offset, those not found in Kafka, and the
time create_topics took (median).
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid

from confluent_kafka import KafkaError as RawKafkaError
from confluent_kafka import Message, TopicPartition
from confluent_kafka.admin import NewTopic

from _stack import local_stack
from streamplane.kafka.admin import KafkaAdmin
from streamplane.kafka.clients import consume_available, make_consumer, make_producer

RECORDS_PER_PARTITION = 8
PAUSE_S = 0.03


def run(bootstrap: str, topics: int, partitions: int, wait: bool) -> str:
    admin = KafkaAdmin(bootstrap)
    acked: dict[bytes, int | None] = {}

    def report(err: RawKafkaError | None, msg: Message) -> None:
        if err is None:
            acked[msg.value() or b""] = msg.offset()

    producer = make_producer(bootstrap, {"on_delivery": report})
    producer.list_topics(timeout=10)  # connected, producer id known
    names = [f"fresh.{'wait' if wait else 'raw'}.{uuid.uuid4().hex[:8]}" for _ in range(topics)]
    create_s: list[float] = []
    sent = 0
    for name in names:
        started = time.monotonic()
        if wait:
            error = admin.create_topics([(name, partitions, 1, {})])[name]
            if error is not None:
                raise SystemExit(f"create {name}: {error}")
        else:
            futures = admin.raw().create_topics([NewTopic(name, partitions, 1)])
            futures[name].result(timeout=30)
        create_s.append(time.monotonic() - started)
        for i in range(RECORDS_PER_PARTITION * partitions):
            producer.produce(name, f"{name}/{i}".encode(), key=str(i).encode())
            producer.poll(0)
            sent += 1
            if i % partitions == partitions - 1:
                time.sleep(PAUSE_S)  # ~1,600 records/s, as a stream's producer might
    if producer.flush(60):
        raise SystemExit("records still unacknowledged after 60 s")
    consumer = make_consumer(bootstrap, f"fresh-{uuid.uuid4().hex[:6]}")
    consumer.assign([TopicPartition(n, p, 0) for n in names for p in range(partitions)])
    found: set[bytes] = set()
    idle_since = time.monotonic()
    while len(found) < len(acked) and time.monotonic() - idle_since < 10:
        batch = consume_available(consumer, 1000, 1.0)
        if batch:
            idle_since = time.monotonic()
        found.update(m.value() or b"" for m in batch if m.error() is None)
    consumer.close()
    admin.delete_topics(names)
    no_offset = sum(1 for offset in acked.values() if offset is None or offset < 0)
    missing = len(set(acked) - found)
    label = "KafkaAdmin.create_topics (waits)" if wait else "raw create_topics (baseline)"
    return (
        f"{label:34s} sent {sent:,}, acked {len(acked):,}, acked without an offset "
        f"{no_offset}, lost {missing}; create median {statistics.median(create_s) * 1000:.0f} ms"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--topics", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=48)
    args = ap.parse_args()
    with local_stack() as stack:
        bootstrap = stack.fleet.bootstrap("local-a")
        print(
            f"{args.topics} fresh topics of {args.partitions} partitions each, "
            f"{RECORDS_PER_PARTITION} records per partition written from the moment the "
            "topic is created:"
        )
        for wait in (False, True):
            print("  " + run(bootstrap, args.topics, args.partitions, wait), flush=True)


if __name__ == "__main__":
    main()
