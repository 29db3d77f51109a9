"""Kill local-a's broker under load: automatic failover, no acknowledged record lost.

The control plane (health on: probe every 0.5 s, down after 2 s) fails the stream over to
local-b by itself; the producer must be writing to local-b within 5 s of the kill. When
the broker returns, a StreamConsumer drains what local-a still holds, and the old
segment is sealed (end offsets read from local-a) and then retired (every group that
reads the stream has settled it).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from streamplane.client.control_plane import ControlPlaneClient
from streamplane.exceptions import ProduceError
from streamplane.local.fleet import LocalFleet
from tests.integration.failover.conftest import (
    ConsumeTrace,
    LoadedProducer,
    consume_ids,
    producer_for,
    segment_states,
)
from tests.waiting import wait_for


def test_broker_kill_fails_over_and_loses_nothing(
    fo_fleet: LocalFleet, fo_client: ControlPlaneClient, fo_stream: Callable[..., str]
) -> None:
    stream = fo_stream("local-a", partitions=3)
    load = LoadedProducer(producer_for(fo_client, stream), rate=500).start()
    try:
        wait_for("500 records acknowledged on local-a", lambda: len(load.acked) > 500, 30)
        broker = fo_fleet.descriptor().cluster("local-a").brokers[0]
        killed_at = time.monotonic()
        fo_fleet.kill_broker("local-a", broker.node_id)
        try:
            wait_for("the automatic failover", lambda: load.producer.epoch > 1, 15)
            switched_at = load.producer.switched_at(2)  # the first change after 1
            assert switched_at is not None
            switched = switched_at - killed_at
            table = load.producer.routing
            assert {table.active(lane).cluster for lane in table.all_lanes} == {"local-b"}
            wait_for(
                "a record acknowledged on local-b",
                lambda: any(a.topic.endswith(f".e{table.epoch}") for a in load.acked.values()),
                10,
            )
            print(f"\nproducer switched to local-b {switched:.2f}s after the kill")
            assert switched < 5.0, f"producer switched {switched:.2f}s after the kill"
            audit = fo_client.audit(stream)
            auto = [e for e in audit if e["action"] == "stream.failover"]
            assert auto and auto[0]["actor"] == "health"
            time.sleep(1.0)
            load.stop(flush_s=0.0)
            # Records sent to local-a before the switch wait for it: flush says so
            # rather than returning while they are undelivered (and close, which
            # flushes, would have dropped them).
            stuck = load.producer.queued()
            assert stuck > 0
            with pytest.raises(ProduceError, match="queued for local-a, which the stream left"):
                load.producer.flush(1.0)
            print(f"{stuck} records queued for local-a while it was down")
        finally:
            load.stop(flush_s=0.0)
            fo_fleet.start_broker("local-a", broker.node_id)
        # The old producer's queue drains to local-a once it is back.
        load.producer.flush(60)
        assert load.failed == 0 and len(load.acked) == load.sent  # every record delivered
        acked = set(load.acked)
        assert len(acked) > 1000
        trace = ConsumeTrace()
        seen, dups = consume_ids(fo_client, stream, "kill-test", acked, timeout=90, trace=trace)
        missing = sorted(acked - seen)
        print(f"acked {len(acked)}, consumed {len(seen)}, duplicates {dups}, lost {len(missing)}")
        assert not missing, f"{len(missing)} acknowledged records lost\n" + trace.explain(
            fo_client, stream, missing, load.acked
        )
        old = f"sp.{stream}.realtime.e1"
        wait_for(
            f"{old} sealed",
            lambda: segment_states(fo_client, stream)[old] in ("sealed", "retired"),
            30,
            every=0.2,
        )
        sealed = next(s for s in fo_client.routing(stream).segments if s.topic == old)
        assert sealed.sealed_end_offsets, "sealed without end offsets"
        # consume again so the group's commits reach the end (if new records came late)
        consume_ids(fo_client, stream, "kill-test", set(), timeout=3)
        wait_for(
            f"{old} retired",
            lambda: segment_states(fo_client, stream)[old] == "retired",
            60,
            every=0.2,
        )
    finally:
        load.producer.close(5)
