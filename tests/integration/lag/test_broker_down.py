"""One broker of three down: the lag stays whole, says what is stale, and is fresh again
soon after the leaders move.

The exploratory run this reproduces: a topic of replication factor 3 on the three-broker
fleet, a dead group (committed, no consumer), one broker killed. The monitor used to
take librdkafka's -1001 answers for the dead broker's partitions as end offsets (they
turned unknown and the group's total fell by a third), its admin client kept asking the
dead broker after the election (end offsets frozen for as long as it was down), and a
poll waited out the dead broker's request timeout for the ends and again for the log
starts, so the history got a point every 10 s instead of every 5 s.

The fleet is the session's ``rack_local_fleet``; the killed broker is started again.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError as RawKafkaError
from confluent_kafka import KafkaException, Producer

from streamplane.core.lag import LagThresholds
from streamplane.kafka.admin import KafkaAdmin
from streamplane.lag.monitor import LagMonitor, MonitorSettings, static_topology, summarize
from streamplane.local.fleet import ClusterInfo, LocalFleet, wait_healthy
from tests.integration.lag.conftest import commit, unique
from tests.waiting import wait_for

PARTITIONS = 6
BUCKET_S = 2.0  # history: a point every 2 s (the control plane's is 5 s)


def _produce(bootstrap: str, topic: str, per_partition: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "log_level": 0, "acks": "all"})
    for i in range(per_partition * PARTITIONS):
        producer.produce(topic, b"x", partition=i % PARTITIONS)
    assert producer.flush(60) == 0


def _commit_retrying(bootstrap: str, group: str, topic: str, offset: int) -> None:
    def done() -> bool:
        try:
            for p in range(PARTITIONS):
                commit(bootstrap, group, topic, p, offset)
        except KafkaException as exc:
            err = exc.args[0]
            if not (err.retriable() or err.code() == RawKafkaError.NOT_COORDINATOR):
                raise
            return False
        return True

    wait_for("the group's commits", done, 60)


def _leaders(admin: KafkaAdmin, topic: str) -> dict[int, int]:
    md = admin.raw().list_topics(topic, timeout=5)
    return {p: pm.leader for p, pm in md.topics[topic].partitions.items()}


def test_a_dead_broker_keeps_the_lag_whole_and_fresh_after_the_election(
    rack_local_fleet: LocalFleet, rack_cluster: ClusterInfo, tmp_path: Path
) -> None:
    bootstrap = rack_cluster.bootstrap
    admin = KafkaAdmin(bootstrap)
    topic = unique("rf3-lag")
    assert admin.create_topics([(topic, PARTITIONS, 3, {})])[topic] is None
    _produce(bootstrap, topic, 100)
    group = unique("dead")
    _commit_retrying(bootstrap, group, topic, 10)
    leaders = _leaders(admin, topic)
    victim = leaders[0]
    led = {p for p, leader in leaders.items() if leader == victim}

    monitor = LagMonitor(
        static_topology({"racked": bootstrap}),
        MonitorSettings(
            snapshot_dir=tmp_path,
            thresholds=LagThresholds(history_size=120, history_interval_s=BUCKET_S),
        ),
    )
    monitor.start()
    killed = False
    try:

        def ends_at(end: int) -> list[Any] | None:
            parts = monitor.partitions(group=group)
            ok = len(parts) == PARTITIONS and all(p.lag.end_offset == end for p in parts)
            return parts if ok else None

        wait_for("the group's lag", lambda: ends_at(100), 60)
        before = summarize(group, monitor.partitions(group=group)).offset_lag
        assert before == PARTITIONS * 90

        rack_local_fleet.kill_broker("racked", victim)
        killed = True
        killed_at = time.time()

        # Until the partitions it led have other leaders (the controller fences a dead
        # broker after its session times out, about 9 s): what the monitor says.
        seen: list[list[Any]] = []

        def elected() -> bool:
            seen.append([p.lag for p in monitor.partitions(group=group)])
            try:
                return victim not in _leaders(admin, topic).values()
            except KafkaException:
                return False

        wait_for("new leaders for the dead broker's partitions", elected, 60, every=0.25)
        totals = [sum(lag.offset_lag or 0 for lag in lags) for lags in seen]
        assert all(lag.offset_lag is not None for lags in seen for lag in lags), (
            "a partition of the dead broker turned unknown"
        )
        assert min(totals) == before  # the dead group's total did not fall

        # Written after the election (to the new leaders): the monitor reads them within
        # a couple of polls, not after its cached leader times out again and again.
        _produce(bootstrap, topic, 50)
        written = time.monotonic()
        fresh = wait_for("the new end offsets in the monitor", lambda: ends_at(150), 30)
        took = time.monotonic() - written
        assert took < 6.0, f"end offsets fresh {took:.1f}s after the election"
        assert not any(p.lag.end_offset_stale for p in fresh)

        # One history point per bucket all along, and the total never fell.
        history = monitor.group_history(group)
        bucket_ms = int(BUCKET_S * 1000)
        since = int(killed_at * 1000) // bucket_ms
        points = [s for s in history["series"] if s[0] // bucket_ms > since]  # type: ignore[attr-defined]
        buckets = [s[0] // bucket_ms for s in points]
        assert len(buckets) >= 4
        assert buckets == list(range(buckets[0], buckets[0] + len(buckets))), buckets
        assert min(s[2] for s in points) >= before, [s[2] for s in points]
        # While the dead broker led them, its partitions were said to be stale (and only
        # they were).
        stale = {lag.partition for lags in seen for lag in lags if lag.end_offset_stale}
        assert stale == led, (stale, led)
    finally:
        monitor.stop()
        if killed:
            rack_local_fleet.start_broker("racked", victim)
            wait_healthy(rack_local_fleet.descriptor().cluster("racked"))
            wait_for(
                "every replica back in sync",
                lambda: all(
                    len(pm.isrs) == 3
                    for pm in admin.raw()
                    .list_topics(topic, timeout=5)
                    .topics[topic]
                    .partitions.values()
                ),
                90,
                every=0.5,
            )
        admin.delete_topics([topic])
