"""A streamplane group's partitions without a commit are tracked from the log start.

A StreamConsumer starts a partition it has no commit for at the log start, and reads
every readable segment of its lanes on every cluster. A group that stopped must not
report 0 s / OK because records landed where it never committed:

- (A) its lane failed over to local-b (new segment topic ``...e2``) and records were
  written there;
- (B) records land on a partition of its stream it never had records (or commits) on.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
from click.testing import CliRunner
from confluent_kafka import Producer

from streamplane.cli.lag import lag as lag_cli
from streamplane.client.consumer import StreamConsumer
from streamplane.local.control_plane_process import ControlPlaneProcess
from streamplane.local.fleet import FleetDescriptor
from tests.integration.lag.conftest import unique
from tests.prometheus import metric_value
from tests.waiting import wait_for


def produce(bootstrap: str, topic: str, partition: int, n: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "log_level": 0})
    for i in range(n):
        producer.produce(topic, b"x" * 10, key=str(i).encode(), partition=partition)
    assert producer.flush(30) == 0


def consume_and_stop(
    cp: ControlPlaneProcess, stream: str, group: str, n: int, lanes: list[str]
) -> None:
    """Read and ack ``n`` records, commit, close: the group then stops."""
    with (
        cp.client() as client,
        StreamConsumer(stream, group, client, lanes, commit_interval_s=0.2) as consumer,
    ):
        seen = 0

        def read() -> bool:
            nonlocal seen
            msg = consumer.poll(0.2)
            if msg is not None:
                msg.ack()
                seen += 1
            return seen >= n

        wait_for(f"{n} records consumed", read, 60)
        consumer.commit()


def partitions(cp: ControlPlaneProcess, group: str) -> list[dict[str, Any]]:
    resp = httpx.get(f"{cp.url}/v1/lag", params={"group": group}, timeout=10)
    resp.raise_for_status()
    parts: list[dict[str, Any]] = resp.json()["partitions"]
    return parts


def find(cp: ControlPlaneProcess, group: str, topic: str, partition: int) -> dict[str, Any] | None:
    for p in partitions(cp, group):
        if p["topic"] == topic and p["partition"] == partition:
            return p
    return None


def group_summary(cp: ControlPlaneProcess, group: str) -> dict[str, Any]:
    groups = httpx.get(f"{cp.url}/v1/groups", timeout=10).json()
    (mine,) = [g for g in groups if g["group"] == group]
    return dict(mine)


def metric(cp: ControlPlaneProcess, name: str, **labels: str) -> float | None:
    return metric_value(httpx.get(f"{cp.url}/metrics", timeout=10).text, name, **labels)


def test_a_failed_over_lane_is_tracked_from_the_log_start(
    control_plane: ControlPlaneProcess,
    fleet: FleetDescriptor,
    stream_factory: Callable[..., str],
) -> None:
    stream = stream_factory("local-a", lanes=("realtime", "bulk"), partitions=1)
    group = unique("stopped")
    old = f"sp.{stream}.realtime.e1"
    produce(fleet.bootstrap("local-a"), old, 0, 5)
    consume_and_stop(control_plane, stream, group, 5, ["realtime"])

    def caught_up() -> dict[str, Any] | None:
        p = find(control_plane, group, old, 0)
        return p if p is not None and p["committed_offset"] == 5 and p["offset_lag"] == 0 else None

    wait_for("the group caught up on local-a", caught_up, 30)

    with control_plane.client() as client:
        table = client.failover(stream, "local-b", reason="lag test")
    new = table.active("realtime").topic
    assert new == f"sp.{stream}.realtime.e2" and table.active("realtime").cluster == "local-b"
    produce(fleet.bootstrap("local-b"), new, 0, 4)

    def behind_on_local_b() -> dict[str, Any] | None:
        p = find(control_plane, group, new, 0)
        return p if p is not None and p["offset_lag"] == 4 and p["time_lag_s"] else None

    part = wait_for("the new segment's partition, behind", behind_on_local_b, 30)
    assert part["cluster"] == "local-b"
    assert (part["stream"], part["lane"]) == (stream, "realtime")
    assert (part["committed_offset"], part["end_offset"], part["last_commit_ms"]) == (None, 4, None)
    assert part["time_lag_s"] > 0.0 and part["status"] in ("OK", "STOP")
    # Only the lane the group reads: no bulk (nor dlq) partitions.
    assert {p["lane"] for p in partitions(control_plane, group)} == {"realtime"}

    summary = group_summary(control_plane, group)
    assert summary["clusters"] == ["local-a", "local-b"]
    assert summary["offset_lag"] == 4 and summary["max_time_lag_s"] > 0.0
    labels = {"group": group, "topic": new, "cluster": "local-b"}
    assert metric(control_plane, "streamplane_group_offset_lag", **labels) == 4
    assert metric(control_plane, "streamplane_group_time_lag_seconds", **labels) is not None
    assert metric(control_plane, "streamplane_group_committed_offset", **labels) is None
    assert metric(control_plane, "streamplane_group_total_offset_lag", group=group) == 4

    out = CliRunner().invoke(lag_cli, ["--url", control_plane.url, "--group", group])
    assert out.exit_code == 0, out.output
    assert new in out.output and "local-b" in out.output
    out = CliRunner().invoke(lag_cli, ["--url", control_plane.url])
    assert out.exit_code == 0 and group in out.output, out.output
    history = httpx.get(f"{control_plane.url}/v1/groups/{group}/lag/history", timeout=10)
    assert history.status_code == 200
    assert {p["topic"] for p in history.json()["partitions"]} == {old, new}


def test_a_partition_never_committed_on_is_tracked_from_the_log_start(
    control_plane: ControlPlaneProcess,
    fleet: FleetDescriptor,
    stream_factory: Callable[..., str],
) -> None:
    stream = stream_factory("local-a", lanes=("realtime",), partitions=2)
    group = unique("one-sided")
    topic = f"sp.{stream}.realtime.e1"
    bootstrap = fleet.bootstrap("local-a")
    produce(bootstrap, topic, 1, 3)
    consume_and_stop(control_plane, stream, group, 3, ["realtime"])

    def both() -> list[dict[str, Any]] | None:
        p0, p1 = find(control_plane, group, topic, 0), find(control_plane, group, topic, 1)
        if p0 is None or p1 is None or p1["committed_offset"] != 3 or p0["offset_lag"] is None:
            return None
        return [p0, p1]

    p0, _ = wait_for("both partitions", both, 30)
    # Empty and never committed on: nothing pending.
    assert (p0["committed_offset"], p0["offset_lag"], p0["time_lag_s"], p0["status"]) == (
        None,
        0,
        0.0,
        "OK",
    )

    produce(bootstrap, topic, 0, 2)

    def behind() -> dict[str, Any] | None:
        p = find(control_plane, group, topic, 0)
        return p if p is not None and p["offset_lag"] == 2 and p["time_lag_s"] else None

    p0 = wait_for("partition 0 behind", behind, 30)
    assert (p0["committed_offset"], p0["end_offset"]) == (None, 2)
    assert p0["time_lag_s"] > 0.0
    summary = group_summary(control_plane, group)
    assert summary["partitions"] == 2 and summary["offset_lag"] == 2
    assert summary["max_time_lag_s"] is not None and summary["max_time_lag_s"] > 0.0
