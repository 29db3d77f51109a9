"""Metrics fetcher: log-dir and Prometheus sources, the cache, and the mapper view."""

from __future__ import annotations

import pytest

from streamplane.core.mapper import BrokerState
from streamplane.exceptions import ConfigError, KafkaError
from streamplane.ops.metrics_fetcher import (
    LogDirsSource,
    MetricsFetcher,
    PrometheusSource,
    cluster_view,
    parse_prometheus_text,
    shares_one_filesystem,
)
from streamplane.ops.stub import StubOpsAdmin

RACKS = {1: "a", 2: "b", 3: "c"}


def _admin() -> StubOpsAdmin:
    return StubOpsAdmin.cluster(
        RACKS,
        {("t", 0): (1, 2), ("t", 1): (2, 3), ("__consumer_offsets", 0): (1, 2, 3)},
        sizes={("t", 0): 100, ("t", 1): 300},
        total_bytes=1000,
    )


def test_log_dirs_source_reports_sizes_and_free_storage() -> None:
    reading = LogDirsSource(_admin()).read()
    assert reading.replica_sizes[(1, ("t", 0))] == 100
    assert reading.free == {1: 900, 2: 600, 3: 700}
    assert reading.total == {1: 1000, 2: 1000, 3: 1000}


def test_capacity_overrides_reported_storage() -> None:
    admin = _admin()
    admin.sizes.clear()
    admin.sizes[("t", 1)] = 50
    reading = LogDirsSource(admin, capacity={1: 500, 2: 400, 3: 400}).read()
    assert reading.free == {1: 500, 2: 350, 3: 350}
    assert reading.total == {1: 500, 2: 400, 3: 400}
    assert not reading.warnings


def test_capacity_below_what_a_broker_holds_is_a_warning() -> None:
    """``--capacity 1B`` planned on every broker at 0 free, without a word."""
    reading = LogDirsSource(_admin(), capacity=250).read()
    assert reading.free == {1: 150, 2: 0, 3: 0}
    assert reading.warnings == (
        "broker(s) 2 (400B), 3 (300B) hold more than the capacity given: counted as full "
        "(no free storage)",
    )


MiB = 1 << 20


@pytest.mark.parametrize(
    ("free", "held", "shared"),
    [
        # one filesystem: the same free storage, whatever each holds
        ({1: 500 * MiB, 2: 500 * MiB, 3: 500 * MiB}, {1: 0, 2: 40 * MiB, 3: 80 * MiB}, True),
        # written to between the answers (an exploratory run: free within 4 KiB, not
        # byte-for-byte equal, and no warning)
        ({1: 500 * MiB, 2: 500 * MiB - 4096, 3: 499 * MiB}, {1: 0, 2: 44 * MiB, 3: 44 * MiB}, True),
        # disks of their own: holding more, less free
        ({1: 900 * MiB, 2: 860 * MiB, 3: 820 * MiB}, {1: 0, 2: 40 * MiB, 3: 80 * MiB}, False),
        # disks of their own, one also holding other files
        ({1: 900 * MiB, 2: 850 * MiB}, {1: 100 * MiB, 2: 100 * MiB}, False),
        # all empty: nothing to tell them apart by
        ({1: 900 * MiB, 2: 900 * MiB}, {1: 0, 2: 0}, False),
    ],
)
def test_shared_filesystems_are_told_by_free_storage_that_ignores_what_is_held(
    free: dict[int, int], held: dict[int, int], shared: bool
) -> None:
    total = dict.fromkeys(free, 1000 * MiB)
    assert shares_one_filesystem(total, free, held) is shared
    assert shares_one_filesystem({**total, 1: 2000 * MiB}, free, held) is False


def test_a_fleet_on_one_filesystem_is_flagged() -> None:
    admin = _admin()
    admin.sizes = {("t", 0): 30 * MiB, ("t", 1): 10 * MiB}
    admin.shared_filesystem = True
    reading = LogDirsSource(admin).read()
    assert any("share one filesystem" in w for w in reading.warnings), reading.warnings


def test_unreachable_broker_is_a_warning_not_a_failure() -> None:
    admin = _admin()
    admin.dead.add(3)
    reading = LogDirsSource(admin).read()
    assert 3 not in reading.free and 1 in reading.free
    admin.fail["log_dirs"] = KafkaError("boom")
    with pytest.raises(KafkaError):
        LogDirsSource(admin).read()


def test_fetcher_caches_for_max_age() -> None:
    admin = _admin()
    now = [0.0]
    fetcher = MetricsFetcher(LogDirsSource(admin), max_age=10, clock=lambda: now[0])
    first = fetcher.snapshot()
    admin.sizes[("t", 0)] = 999
    now[0] = 5.0
    assert fetcher.snapshot() is first
    now[0] = 10.5
    assert fetcher.snapshot().partition_sizes()[("t", 0)] == 999
    assert fetcher.snapshot(max_age=0).taken_at == 10.5


PROM = """
# HELP kafka_log_log_size size
# TYPE kafka_log_log_size gauge
kafka_log_log_size{broker="1",topic="t",partition="0"} 100
kafka_log_log_size{broker="2",topic="t",partition="0"} 90
kafka_log_log_size{broker="2",topic="t",partition="1"} 3e2
kafka_broker_storage_free_bytes{broker="1"} 900 1700000000000
kafka_broker_storage_free_bytes{broker="2"} 600
kafka_broker_storage_total_bytes{broker="2"} 1000
other_metric{x="y"} 1
kafka_log_log_size{topic="t",partition="9"} 5
"""


def test_prometheus_source_parses_the_text_format() -> None:
    reading = PrometheusSource(lambda: PROM).read()
    assert reading.replica_sizes == {(1, ("t", 0)): 100, (2, ("t", 0)): 90, (2, ("t", 1)): 300}
    assert reading.free == {1: 900, 2: 600}
    assert reading.total == {1: 900, 2: 1000}
    assert reading.warnings  # the sample without a broker label
    with pytest.raises(ConfigError, match="line 1"):
        parse_prometheus_text("not a { sample")


def test_cluster_view_marks_dead_and_new_brokers_and_skips_internal_topics() -> None:
    admin = _admin()
    admin.brokers_[4] = admin.brokers_[1].__class__(4, "127.0.0.1", 9004, "a")
    admin.total_bytes[4] = 1000
    admin.dead.add(1)
    view = cluster_view(admin, MetricsFetcher(LogDirsSource(admin)), racks={1: "a"})
    assert [p.key for p in view.partitions] == [("t", 0), ("t", 1)]
    assert view.partitions[("t", 1)].size == 300
    assert view.brokers[1].state is BrokerState.DEAD and view.brokers[1].rack == "a"
    assert view.brokers[4].state is BrokerState.NEW
    assert view.brokers[2].storage_free == 600
    retiring = cluster_view(admin, None, states={3: BrokerState.RETIRING}, topics=["t"])
    assert retiring.brokers[3].state is BrokerState.RETIRING
    with pytest.raises(ConfigError, match="no topic matches"):
        cluster_view(admin, None, topics=["nope.*"])
    with pytest.raises(ConfigError, match="unknown broker"):
        cluster_view(admin, None, states={9: BrokerState.RETIRING})
