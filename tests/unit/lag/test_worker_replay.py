"""A cluster worker replays its snapshot at once, without the cluster: a control plane
restarted while a cluster is down keeps reporting (and aging) that cluster's lag.

The cluster here is a closed local port: the worker opens no Kafka client for it."""

from __future__ import annotations

import json
import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from streamplane.core.lag import LagStatus, LagThresholds
from streamplane.lag.monitor import ClusterWorker, MonitorSettings
from streamplane.lag.reader import CommitState, OffsetsSnapshot, with_timestamps
from tests.waiting import wait_for

T0_S = 1_700_000_000.0
TOPIC = "sp.orders.realtime.e1"


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Clock:
    def __init__(self) -> None:
        self.now = T0_S

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def worker_of(tmp_path: Path, clock: Clock) -> Iterator[Callable[[], ClusterWorker]]:
    workers: list[ClusterWorker] = []

    def make() -> ClusterWorker:
        settings = MonitorSettings(
            snapshot_dir=tmp_path,
            end_offset_interval_s=0.02,
            thresholds=LagThresholds(history_size=20, history_interval_s=1.0),
        )
        w = ClusterWorker(
            "local-a",
            f"127.0.0.1:{closed_port()}",
            settings,
            clock,
            lambda _cluster, topic: ("orders", "realtime") if topic == TOPIC else None,
        )
        workers.append(w)
        w.start()
        return w

    yield make
    for w in workers:
        w.stop()


def _snapshot(tmp_path: Path, *, with_ends: bool) -> None:
    t0_ms = int(T0_S * 1000)
    snap = OffsetsSnapshot(
        "cluster-id-a",
        {0: 12},
        {
            ("g", TOPIC, 0): CommitState(40, t0_ms - 2_000, t0_ms - 10_000, True),
            ("g", TOPIC, 1): CommitState(7, t0_ms - 2_000, None, True),
        },
        saved_ms=t0_ms - 1_000,
        ends={(TOPIC, 0): (100, t0_ms - 1_500, -1), (TOPIC, 1): (7, t0_ms - 1_500, -1)},
    )
    doc = json.loads(snap.to_json())
    if not with_ends:  # as written before end offsets were saved
        del doc["ends"]
    (tmp_path / "local-a.json").write_text(json.dumps(doc))


def test_a_restart_while_the_cluster_is_down_replays_the_snapshot(
    tmp_path: Path, clock: Clock, worker_of: Callable[[], ClusterWorker]
) -> None:
    _snapshot(tmp_path, with_ends=True)
    w = worker_of()
    now_ms = int(T0_S * 1000)
    parts = wait_for("the replayed partitions", lambda: w.partitions(now_ms), 30)
    by_partition = {p.partition: p for p in parts}
    p0, p1 = by_partition[0], by_partition[1]
    assert (p0.committed_offset, p0.end_offset, p0.offset_lag, p0.time_lag_s) == (40, 100, 60, 10.0)
    labels = p0.labels
    assert (labels.stream, labels.lane, labels.cluster) == ("orders", "realtime", "local-a")
    assert (p1.offset_lag, p1.time_lag_s, p1.status) == (0, 0.0, LagStatus.OK)
    status = w.status
    assert status.resumed_from_snapshot and status.snapshot_commits == 2
    assert status.commits_tracked == 2 and not status.caught_up
    wait_for("the unreachable cluster noticed", lambda: w.status.last_error, 30)
    assert w.status.resumed_from_snapshot  # kept while the cluster does not answer

    # The cluster stays down: the lag keeps growing, and the history records it.
    clock.now = T0_S + 30
    later = {p.partition: p for p in w.partitions(int(clock.now * 1000))}[0]
    assert (later.offset_lag, later.time_lag_s) == (60, 40.0)

    def sampled_at_40s() -> bool:
        ((_, samples, route),) = [h for h in w.histories("g") if h[0][2] == 0]
        return route == ("orders", "realtime") and samples[-1].time_lag_s == 40.0

    wait_for("a history sample while the cluster is down", sampled_at_40s, 30)


def test_an_old_snapshot_without_end_offsets_still_replays_its_commits(
    tmp_path: Path, worker_of: Callable[[], ClusterWorker]
) -> None:
    _snapshot(tmp_path, with_ends=False)
    w = worker_of()
    parts = wait_for("the replayed partitions", lambda: w.partitions(int(T0_S * 1000)), 30)
    p0 = {p.partition: p for p in parts}[0]
    assert (p0.committed_offset, p0.end_offset, p0.offset_lag, p0.time_lag_s) == (
        40,
        None,
        None,
        10.0,
    )
    assert w.status.resumed_from_snapshot


def test_snapshot_round_trip_with_end_offsets() -> None:
    snap = OffsetsSnapshot(
        "id",
        {0: 1},
        {("g", "t", 0): CommitState(5, 1_000, 900, True)},
        saved_ms=3,
        ends={("t", 0): (9, 2_000, 4), ("dlq", 0): (3, 2_000, -1)},
    )
    assert OffsetsSnapshot.from_json(snap.to_json()) == snap


def test_looked_up_timestamps_fill_only_commits_without_one_at_that_offset() -> None:
    commits = {
        ("foreign", "t", 0): CommitState(5, 1_000, None, False),
        ("moved", "t", 0): CommitState(9, 1_000, None, False),
        ("sp", "t", 0): CommitState(5, 1_000, 700, True),
    }
    looked_up = {("foreign", "t", 0): (5, 800), ("moved", "t", 0): (8, 800), ("sp", "t", 0): (5, 1)}
    out = with_timestamps(commits, looked_up)
    assert out[("foreign", "t", 0)] == CommitState(5, 1_000, 800, False)
    assert out[("moved", "t", 0)] == commits[("moved", "t", 0)]  # of another record
    assert out[("sp", "t", 0)] == commits[("sp", "t", 0)]  # its own metadata wins
    assert commits[("foreign", "t", 0)].low_watermark_ts_ms is None  # not changed in place
