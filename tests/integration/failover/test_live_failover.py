"""Failover on purpose, under load: zero loss, producers on the new topic within 1 s of
the epoch change (the new routing saved, after its topics were created); and a
repartition (6 -> 12 partitions) on one cluster the same way.

bench/failover_latency.py runs the same loop ten times for the latency distribution.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from streamplane.client.control_plane import ControlPlaneClient
from tests.integration.failover.conftest import (
    ConsumeTrace,
    LoadedProducer,
    consume_ids,
    producer_for,
    segment_states,
)
from tests.waiting import wait_for


def test_failover_under_load(fo_client: ControlPlaneClient, fo_stream: Callable[..., str]) -> None:
    stream = fo_stream("local-a", partitions=3)
    started = time.monotonic()
    load = LoadedProducer(producer_for(fo_client, stream), rate=5000).start()
    after_change: list[float] = []  # the acceptance figure
    after_command: list[float] = []  # plus the topic creation inside the call
    wall_minus_mono = time.time() - time.monotonic()

    def on_epoch(epoch: int) -> Callable[[], bool]:
        return lambda: load.producer.epoch >= epoch

    try:
        wait_for("2000 records acknowledged", lambda: len(load.acked) > 2000, 30)
        for target in ("local-b", "local-a"):
            commanded = time.monotonic()
            table = fo_client.failover(stream, target, reason="test under load")
            wait_for(
                f"the producer on epoch {table.epoch} (failover to {target})",
                on_epoch(table.epoch),
                10,
            )
            # The first table at or past the failover's epoch the producer applied: a
            # seal of the segments the last failover left (a transition, its own epoch)
            # may land at once, and the watch then hands over only the newest table.
            switches = load.producer.epoch_switch_times
            switched = min(t for e, t in list(switches.items()) if e >= table.epoch)
            changed = fo_client.epoch_changed_at(stream, table.epoch)
            assert changed is not None, f"no audit entry for epoch {table.epoch}"
            after_change.append(switched + wall_minus_mono - changed.timestamp())
            after_command.append(switched - commanded)
            time.sleep(2.0)
    finally:
        load.stop()
        load.producer.close(10)
    acked = set(load.acked)
    trace = ConsumeTrace()
    seen, dups = consume_ids(
        fo_client, stream, "load-test", acked, timeout=120, members=3, trace=trace
    )
    missing = sorted(acked - seen)
    rate = load.sent / (load.stopped_at - started)
    print(
        f"\nsent {load.sent} (~{rate:.0f}/s), acked {len(acked)}, consumed {len(seen)}, "
        f"duplicates {dups}, lost {len(missing)}; switch after the epoch change: "
        + ", ".join(f"{x * 1000:.0f} ms" for x in after_change)
        + "; after the command: "
        + ", ".join(f"{x * 1000:.0f} ms" for x in after_command)
    )
    assert not missing, f"{len(missing)} acknowledged records lost\n" + trace.explain(
        fo_client, stream, missing, load.acked
    )
    assert max(after_change) < 1.0, after_change


def test_repartition_on_one_cluster(
    fo_client: ControlPlaneClient, fo_stream: Callable[..., str]
) -> None:
    stream = fo_stream("local-b", partitions=6)
    load = LoadedProducer(producer_for(fo_client, stream), rate=1000).start()
    try:
        wait_for("500 records acknowledged", lambda: len(load.acked) > 500, 30)
        table = fo_client.failover(stream, "local-b", lanes=["realtime"], partitions=12)
        wait_for(
            f"the producer on epoch {table.epoch}", lambda: load.producer.epoch >= table.epoch, 10
        )
        assert table.active("realtime").partitions == 12
        assert table.active("realtime").cluster == "local-b"
        wait_for(
            "a record acknowledged on the new topic (.e2)",
            lambda: any(a.topic.endswith(".e2") for a in load.acked.values()),
            10,
        )
        time.sleep(1.0)
    finally:
        load.stop()
        load.producer.close(10)
    acked = set(load.acked)
    trace = ConsumeTrace()
    seen, _ = consume_ids(fo_client, stream, "repartition", acked, timeout=60, trace=trace)
    missing = sorted(acked - seen)
    assert not missing, f"{len(missing)} acknowledged records lost\n" + trace.explain(
        fo_client, stream, missing, load.acked
    )
    # The reader's own account agrees: on these topics (not compacted, no transactions)
    # no fetch skipped an offset, and every new-topic partition was read and settled.
    new_topic = [s for s in trace.states if s["topic"] == f"sp.{stream}.realtime.e2"]
    assert len(new_topic) == 12
    assert all(s["gaps_settled"] == 0 for s in trace.states), trace.states
    assert all(s["in_flight"] == 0 and s["fetched"] > 0 for s in new_topic), new_topic
    old = f"sp.{stream}.realtime.e1"
    # sealed (and maybe already retired) while the group was still consuming
    wait_for(
        f"{old} sealed",
        lambda: segment_states(fo_client, stream)[old] in ("sealed", "retired"),
        30,
        every=0.2,
    )
    wait_for(
        f"{old} retired",
        lambda: segment_states(fo_client, stream)[old] == "retired",
        60,
        every=0.2,
    )
    sealed = next(s for s in fo_client.routing(stream).segments if s.topic == old)
    assert sorted(sealed.sealed_end_offsets) == list(range(6))
