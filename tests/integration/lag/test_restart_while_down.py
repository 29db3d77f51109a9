"""A control-plane restart while a cluster is down keeps that cluster's lag.

The monitor replays its reader snapshot (commits and last known end offsets) at start,
before the cluster answers: the group's partitions are listed at once (a group whose
commits carry no timestamp, any Kafka consumer, with the timestamp the monitor looked
up), their time lag keeps growing (and is recorded in the history) while the broker is
down, and when the broker is back the snapshot is verified against the cluster and kept.

The session fleet's local-a broker is killed here and started again (the session's
control plane runs with health checks off: nothing fails over meanwhile).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import httpx
from confluent_kafka import KafkaError as RawKafkaError
from confluent_kafka import KafkaException, Producer

from streamplane.core.commitlog import PartitionProgress, encode
from streamplane.local.control_plane_process import ControlPlaneProcess
from streamplane.local.fleet import FleetDescriptor, LocalFleet, wait_healthy
from tests.integration.lag.conftest import commit, unique
from tests.waiting import wait_for

_COORDINATOR_NOT_READY = {
    RawKafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    RawKafkaError.COORDINATOR_NOT_AVAILABLE,
    RawKafkaError.NOT_COORDINATOR,
}


def produce(bootstrap: str, topic: str, n: int, partition: int = 0) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "log_level": 0})
    for i in range(n):
        producer.produce(topic, b"x", key=str(i).encode(), partition=partition)
    assert producer.flush(30) == 0


def commit_retrying(
    bootstrap: str, group: str, topic: str, partition: int, offset: int, metadata: str
) -> None:
    """``commit``, again while the group coordinator is not ready yet (a fresh fleet)."""

    def done() -> bool:
        try:
            commit(bootstrap, group, topic, partition, offset, metadata)
        except KafkaException as exc:
            err = exc.args[0]
            if not (err.retriable() or err.code() in _COORDINATOR_NOT_READY):
                raise
            return False
        return True

    wait_for("the commit", done, 60)


def _get(cp: ControlPlaneProcess, path: str, **params: str) -> Any:
    resp = httpx.get(f"{cp.url}{path}", params=params, timeout=10)
    resp.raise_for_status()
    return resp.json()


def _partition(cp: ControlPlaneProcess, group: str) -> dict[str, Any] | None:
    """The group's only partition in /v1/lag (None before it is tracked)."""
    parts = _get(cp, "/v1/lag", group=group)["partitions"]
    return parts[0] if parts else None


def _reader(cp: ControlPlaneProcess, cluster: str) -> dict[str, Any]:
    (reader,) = [r for r in _get(cp, "/v1/lag/readers") if r["cluster"] == cluster]
    return dict(reader)


def test_a_restart_while_the_cluster_is_down_keeps_its_lag(
    control_plane: ControlPlaneProcess,
    local_fleet: LocalFleet,
    fleet: FleetDescriptor,
    topic_factory: Callable[..., str],
) -> None:
    cluster = fleet.cluster("local-a")
    bootstrap = cluster.bootstrap
    topic = topic_factory("local-a")
    group = unique("down")
    produce(bootstrap, topic, 10)
    pending_since_ms = int(time.time() * 1000) - 5_000
    metadata = encode(
        PartitionProgress(
            low_watermark=3,
            commit_time_ms=int(time.time() * 1000),
            low_watermark_timestamp_ms=pending_since_ms,
        )
    ).metadata
    commit_retrying(bootstrap, group, topic, 0, 3, metadata)
    foreign = unique("foreign")  # commits without metadata: its timestamp is looked up
    commit_retrying(bootstrap, foreign, topic, 0, 4, "")

    def behind() -> dict[str, Any] | None:
        p = _partition(control_plane, group)
        return p if p is not None and p["end_offset"] == 10 else None

    def foreign_timed() -> dict[str, Any] | None:
        p = _partition(control_plane, foreign)
        return p if p is not None and p["time_lag_s"] is not None else None

    wait_for("the group's lag with the end offset", behind, 30)
    wait_for("the other group's looked-up time lag", foreign_timed, 30)
    # The monitor saves its snapshot every 5 s and on stop: stopping saves it.

    broker = cluster.brokers[0]
    local_fleet.kill_broker("local-a", broker.node_id)
    try:
        control_plane.stop()  # the readers save their snapshots (with the end offsets)
        control_plane.start()

        # local-a is down: its lag comes from the snapshot, at once.
        part = wait_for("the replayed partition", lambda: _partition(control_plane, group), 30)
        assert part["cluster"] == "local-a"
        assert (part["committed_offset"], part["end_offset"], part["offset_lag"]) == (3, 10, 7)
        first = part["time_lag_s"]
        assert first is not None and first >= 5.0
        # The looked-up timestamp was saved too: no lookup is possible now.
        other = _partition(control_plane, foreign)
        assert other is not None and (other["committed_offset"], other["offset_lag"]) == (4, 6)
        assert other["time_lag_s"] is not None and other["time_lag_s"] > 0
        reader = _reader(control_plane, "local-a")
        assert reader["resumed_from_snapshot"] and reader["commits_tracked"] > 0
        assert not reader["caught_up"]

        # ... and keeps growing while the cluster stays down, in /v1/lag and the history.
        def grown() -> dict[str, Any] | None:
            p = _partition(control_plane, group)
            return p if p is not None and p["time_lag_s"] >= first + 2.0 else None

        later = wait_for("the time lag growing while local-a is down", grown, 30)
        assert later["offset_lag"] == 7 and later["end_offset"] == 10

        def recorded() -> bool:
            series = _get(control_plane, f"/v1/groups/{group}/lag/history")["series"]
            return bool(series) and series[-1][1] >= first + 2.0 and series[-1][2] == 7

        wait_for("the history recording the growing lag", recorded, 30)
        groups = [g for g in _get(control_plane, "/v1/groups") if g["group"] == group]
        assert groups and groups[0]["offset_lag"] == 7
        assert groups[0]["max_time_lag_s"] >= first
    finally:
        local_fleet.start_broker("local-a", broker.node_id)
        wait_healthy(local_fleet.descriptor().cluster("local-a"))

    # Back: the snapshot is of this cluster (kept), the reader catches up from it.
    def caught_up() -> dict[str, Any] | None:
        r = _reader(control_plane, "local-a")
        return r if r["caught_up"] else None

    reader = wait_for("local-a's reader caught up", caught_up, 60)
    assert reader["resumed_from_snapshot"]
    back = _partition(control_plane, group)
    assert back is not None and (back["committed_offset"], back["offset_lag"]) == (3, 7)
