"""A retired segment is fenced once its watch is over: a write that comes later (a
producer paused for longer than the watch) is refused by the broker, and the producer's
delivery report fails, instead of being acknowledged and never read. Before the fence,
such a write was acknowledged into a segment no group reads."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaError as RawKafkaError
from confluent_kafka import Message, Producer

from streamplane.client.producer import StreamProducer
from streamplane.controlplane.cluster_io import FENCED_TOPIC_CONFIG
from streamplane.kafka.clients import make_consumer, producer_config
from streamplane.local.control_plane_process import ControlPlaneProcess
from streamplane.local.fleet import LocalFleet
from tests.integration.failover.conftest import (
    consume_ids,
    failover_control_plane,
    segment_states,
)
from tests.waiting import wait_for

pytestmark = pytest.mark.integration


@pytest.fixture
def watch_1s(
    tmp_path_factory: pytest.TempPathFactory, fo_fleet: LocalFleet
) -> Iterator[ControlPlaneProcess]:
    """A control plane of its own on the failover fleet, watching retired segments 1 s."""
    data_dir = tmp_path_factory.mktemp("fence-cp")
    with failover_control_plane(data_dir, fo_fleet, "--retired-watch", "1") as cp:
        yield cp


def test_a_retired_segment_refuses_writes_once_its_watch_is_over(
    watch_1s: ControlPlaneProcess, fo_fleet: LocalFleet
) -> None:
    stream = f"fence-{uuid.uuid4().hex[:8]}"
    with watch_1s.client(timeout=60) as client:
        client.create_stream(stream, "local-a", partitions=2, lanes=["realtime"])
        old = client.routing(stream).active("realtime").topic
        with StreamProducer(stream, client) as producer:
            for n in range(100):
                producer.send(b"%d" % n)
        client.failover(stream, "local-b", ["realtime"])
        seen, _ = consume_ids(client, stream, "g-fence", set(range(100)), 60)
        assert seen >= set(range(100))
        wait_for(f"{old} retired", lambda: segment_states(client, stream)[old] == "retired", 60)
        wait_for(
            f"{old} fenced",
            lambda: any(e["action"] == "segment.fenced" for e in client.audit(stream)),
            30,
            every=0.5,
        )
        fenced = next(e for e in client.audit(stream) if e["action"] == "segment.fenced")
        assert fenced["detail"] == {"cluster": "local-a", "topic": old, **FENCED_TOPIC_CONFIG}

        # A late write (what a producer paused past the watch sends) is refused at once.
        bootstrap = fo_fleet.descriptor().bootstrap("local-a")
        reports: list[RawKafkaError | None] = []

        def report(err: RawKafkaError | None, _msg: Message) -> None:
            reports.append(err)

        late = Producer(producer_config(bootstrap, {"on_delivery": report}))
        for n in range(10):
            late.produce(old, b"late-%d" % n)
        assert late.flush(30) == 0
        assert len(reports) == 10 and all(
            e is not None and e.code() == RawKafkaError.MSG_SIZE_TOO_LARGE for e in reports
        ), reports
        assert segment_states(client, stream)[old] == "retired"  # nothing landed

        # Reads are not fenced: the old records are still there for whoever reads them.
        consumer = make_consumer(bootstrap, f"reader-{uuid.uuid4().hex[:6]}")
        try:
            consumer.subscribe([old])
            values: list[bytes] = []

            def read_all() -> bool:
                values.extend(m.value() or b"" for m in consumer.consume(100, 0.5) if not m.error())
                return len(values) >= 100

            wait_for("the fenced topic read", read_all, 30)
        finally:
            consumer.close()
        assert not any(v.startswith(b"late") for v in values)
