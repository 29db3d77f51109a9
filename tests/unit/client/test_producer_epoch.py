"""The epoch a producer's heartbeat tells the sealer once the routing moved on and the
application sends nothing more (a consumer's dlq producer, an idle producer).

A librdkafka producer's queue holds events besides records (statistics every few
seconds, errors from a broker that does not answer), counted by ``len`` until served.
An operator's exploratory run saw a consumer with no producer running listed among the
stream's live producers at the old epoch after a failover, and every failover with such
clients sealed only after the grace period. Without Kafka: real librdkafka producers
whose bootstrap is a closed local port (events pile up at once)."""

from __future__ import annotations

import dataclasses

from streamplane.client.producer import StreamProducer
from streamplane.core.routing import move_lanes, new_routing_table
from tests.unit.client.test_producer_close import closed_port
from tests.waiting import wait_for


def idle_producer(lanes: list[str]) -> StreamProducer:
    """An opened, failure-reports-only producer of stream ``s`` on local-a, epoch 1."""
    producer = StreamProducer("s", None, delivery_reports="errors")  # type: ignore[arg-type]
    for cluster in ("local-a", "local-b"):
        producer._bootstraps[cluster] = f"127.0.0.1:{closed_port()}"
    producer._max_record_bytes = 1 << 20
    producer._default_lane = lanes[0]
    producer._apply(new_routing_table("s", lanes, "local-a", 1))
    producer._opened = True
    return producer


def test_a_retired_producer_with_only_events_queued_does_not_hold_the_old_epoch() -> None:
    producer = idle_producer(["realtime"])
    table = new_routing_table("s", ["realtime"], "local-b", 1)
    producer._apply(dataclasses.replace(table, epoch=2))
    ((_, retired),) = producer._retired
    wait_for("events queued in the retired producer", lambda: len(retired) > 0, 10)
    assert producer._reported_epoch() == 2
    assert producer._retired == []  # nothing of its own queued: let go


def test_a_producer_kept_for_another_lane_does_not_hold_the_old_epoch() -> None:
    """The realtime lane moves to local-b; the dlq lane stays on local-a, whose
    producer is kept and was told draining (its queue was not empty as it moved)."""
    producer = idle_producer(["realtime"])  # and the dlq lane, always there
    kept = producer._producers["local-a"]
    wait_for("events queued in local-a's producer", lambda: len(kept) > 0, 10)
    producer._apply(move_lanes(new_routing_table("s", ["realtime"], "local-a", 1),
                               ["realtime"], "local-b"))  # fmt: skip
    assert producer._draining, "the scenario: local-a's producer told draining"
    assert producer._reported_epoch() == 2
