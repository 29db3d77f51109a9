"""A whole-fleet restart moves no stream.

An exploratory run: a control plane with health checks on watched local-a and local-b;
the operator ran ``local down`` then ``local up``; local-b answered ~3 s before local-a,
and the health loop failed local-a's streams (dlq lanes included) over to local-b for
good: local-a was down, and local-b, just back, was ok. Now when every cluster failed at
once, the clusters get ``--health-recovery`` (30 s) from the first one's answer to come
back before any is failed over, and a target must have been ok for the threshold
(``core.failover.failover_hold``).

Here both clusters' brokers are killed and, once the control plane has found both down,
started again as ``local up`` does, local-b's first and local-a's a few seconds later:
no stream moves. (On this project's 2-core host a broker takes ~15-20 s to start.)
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable

import pytest

from streamplane.client.control_plane import ControlPlaneClient
from streamplane.exceptions import LocalFleetError
from streamplane.local.fleet import LocalFleet
from tests.waiting import wait_for

pytestmark = pytest.mark.integration

RECOVERY_S = 30.0  # serve's default --health-recovery (the failover control plane's)
LAUNCH_GAP_S = 3.0  # local-a's broker starts this long after local-b's


def health(client: ControlPlaneClient) -> dict[str, str]:
    return {c["name"]: c["health"] for c in client.cluster_health()["clusters"]}


def actives(client: ControlPlaneClient, stream: str) -> dict[str, tuple[str, int]]:
    table = client.routing(stream)
    return {
        lane: (table.active(lane).cluster, table.active(lane).epoch) for lane in table.all_lanes
    }


def test_a_fleet_restart_moves_no_stream(
    fo_fleet: LocalFleet, fo_client: ControlPlaneClient, fo_stream: Callable[..., str]
) -> None:
    desc = fo_fleet.descriptor()
    brokers = {name: desc.cluster(name).brokers[0].node_id for name in ("local-a", "local-b")}
    streams = {}
    for cluster in ("local-a", "local-b"):
        name = fo_stream(cluster, partitions=2)
        streams[name] = actives(fo_client, name)
        assert {c for c, _ in streams[name].values()} == {cluster}  # the dlq too
    try:
        for cluster, node in brokers.items():
            fo_fleet.kill_broker(cluster, node)
        wait_for(
            "both clusters down",
            lambda: set(health(fo_client).values()) == {"down"},
            30,
            every=0.2,
        )
        fo_fleet.start_broker("local-b", brokers["local-b"], wait=False)
        time.sleep(LAUNCH_GAP_S)
        fo_fleet.start_broker("local-a", brokers["local-a"], wait=False)
        wait_for("local-b ok", lambda: health(fo_client)["local-b"] == "ok", 90, every=0.1)
        b_ok = time.monotonic()
        wait_for("local-a ok", lambda: health(fo_client)["local-a"] == "ok", 90, every=0.1)
        gap = time.monotonic() - b_ok
        print(f"\nlocal-a answered {gap:.1f}s after local-b")
        time.sleep(2.0)  # a failover decided at local-a's last failed probe is saved by now
    finally:
        for cluster, node in brokers.items():
            with contextlib.suppress(LocalFleetError):  # started already
                fo_fleet.start_broker(cluster, node)
    after = {name: actives(fo_client, name) for name in streams}
    failovers = [
        (name, e["detail"].get("reason"))
        for name in streams
        for e in fo_client.audit(name)
        if e["action"] == "stream.failover"
    ]
    assert after == streams and not failovers, (
        f"streams moved after a fleet restart (local-a back {gap:.1f}s after local-b): "
        f"{after} {failovers}"
    )
    assert gap < RECOVERY_S, f"local-a took {gap:.1f}s to come back: not a restart any more"
