"""`local up` after a plain `local down` starts the same fleet again with its data: the
same Kafka cluster id and bootstrap, the topic and its record still there. It used to
format the storage anew with a new cluster id, and every topic was gone."""

from __future__ import annotations

from pathlib import Path

from confluent_kafka import TopicPartition

from streamplane.kafka.admin import KafkaAdmin
from streamplane.kafka.clients import consume_available, make_consumer, make_producer
from streamplane.local.fleet import FleetSpec, LocalFleet
from tests.waiting import wait_for

TOPIC = "persist-test"


def test_up_after_a_plain_down_keeps_the_cluster_its_topics_and_records(tmp_path: Path) -> None:
    data_dir = tmp_path / "fleet"
    fleet = LocalFleet(data_dir)
    spec = FleetSpec(data_dir=data_dir, clusters=1, brokers_per_cluster=1, heap_mb=256)
    try:
        first = fleet.up(spec).cluster("local-a")
        assert KafkaAdmin(first.bootstrap).cluster_id() == first.cluster_id
        err = KafkaAdmin(first.bootstrap).create_topics([(TOPIC, 1, 1, {})])[TOPIC]
        assert err is None, err
        producer = make_producer(first.bootstrap)
        producer.produce(TOPIC, key=b"k", value=b"kept across down and up")
        assert producer.flush(30) == 0
        fleet.down()
        assert (Path(first.brokers[0].log_dir) / f"{TOPIC}-0").is_dir()

        progress: list[str] = []
        second = fleet.up(spec, progress=progress.append).cluster("local-a")

        assert second.cluster_id == first.cluster_id
        assert second.bootstrap == first.bootstrap
        assert KafkaAdmin(second.bootstrap).cluster_id() == first.cluster_id
        assert TOPIC in KafkaAdmin(second.bootstrap).metadata().topics
        consumer = make_consumer(second.bootstrap, "restart-keeps-data")
        try:
            consumer.assign([TopicPartition(TOPIC, 0, 0)])
            records = wait_for(
                "the record written before `local down`",
                lambda: [m for m in consume_available(consumer, 10, 1.0) if m.error() is None],
                60,
            )
        finally:
            consumer.close()
        assert [(m.key(), m.value()) for m in records] == [(b"k", b"kept across down and up")]
        assert any("restarting the stopped fleet" in line for line in progress), progress
    finally:
        fleet.down(purge=True)
