"""The lag monitor inside the control plane (the session's subprocess), on the real fleet.

- accuracy: a StreamConsumer throttled to half the production rate; the reported time
  lag stays within 1 s of the truth (now minus the ingestion time of the record the
  consumer is on);
- a commit shows in /metrics within 1 s;
- two clusters at once;
- a restart resumes from the readers' snapshots.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx
from click.testing import CliRunner
from prometheus_client import generate_latest

from streamplane.cli.lag import lag
from streamplane.client.consumer import StreamConsumer
from streamplane.client.metrics import REGISTRY
from streamplane.client.producer import StreamProducer
from streamplane.core.commitlog import PartitionProgress, encode
from streamplane.local.control_plane_process import ControlPlaneProcess
from streamplane.local.fleet import FleetDescriptor
from tests.integration.lag.conftest import commit, unique
from tests.prometheus import metric_value
from tests.waiting import wait_for

RATE = 40.0  # records/s produced
HANDLE_S = 1 / 20.0  # the consumer handles 20 records/s: it falls behind 0.5 s per second


def _lag(cp: ControlPlaneProcess, **params: str) -> dict[str, Any]:
    resp = httpx.get(f"{cp.url}/v1/lag", params=params, timeout=5)
    resp.raise_for_status()
    doc: dict[str, Any] = resp.json()
    return doc


def test_time_lag_is_within_a_second_of_the_truth(
    control_plane: ControlPlaneProcess, stream_factory: Callable[..., str]
) -> None:
    stream = stream_factory("local-a", lanes=("realtime",), partitions=1)
    group = unique("acc")
    stop = threading.Event()
    current_ts: list[int] = []  # ingestion time of the record being handled (unsettled)

    def produce() -> None:
        with control_plane.client() as client, StreamProducer(stream, client) as producer:
            start = time.monotonic()
            i = 0
            while not stop.is_set():
                producer.send(b"x" * 100, key=str(i).encode())
                producer.poll(0)
                i += 1
                time.sleep(max(0.0, start + i / RATE - time.monotonic()))

    def consume() -> None:
        with (
            control_plane.client() as client,
            StreamConsumer(stream, group, client, commit_interval_s=0.5) as consumer,
        ):
            last_commit = time.monotonic()
            while not stop.is_set():
                msg = consumer.poll(0.2)
                if msg is not None:
                    current_ts[:] = [msg.timestamp_ms]
                    time.sleep(HANDLE_S)
                    msg.ack()
                if time.monotonic() - last_commit >= 0.5:  # the client commits every 256
                    consumer.commit()  # records with a slow handler: commit on time here
                    last_commit = time.monotonic()

    threads = [threading.Thread(target=produce), threading.Thread(target=consume)]
    for t in threads:
        t.start()
    errors: list[float] = []
    unknown = 0
    try:
        wait_for("first commit", lambda: _lag(control_plane, group=group)["partitions"], 30)
        time.sleep(2.0)
        for _ in range(12):
            for _attempt in range(8):
                before = time.time()
                doc = _lag(control_plane, group=group)
                after = time.time()
                (part,) = doc["partitions"]
                reported = part["time_lag_s"]
                truth = (before + after) / 2 - current_ts[0] / 1000.0
                if reported is not None:
                    break
                # A commit made when every fetched record was settled carries no
                # timestamp for its committed record: the monitor fetches that record
                # as soon as it reads the commit (lookups at most every 0.1 s, 0.5 s
                # timeout; under load this takes longer than one retry).
                unknown += 1
                time.sleep(0.3)
            assert reported is not None, "time lag still unknown 2.4 s after a commit"
            errors.append(reported - truth)
            time.sleep(0.5)
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    worst = max(abs(e) for e in errors)
    print(
        f"\ntime lag error over {len(errors)} samples: mean {statistics.mean(errors):+.3f}s, "
        f"worst {worst:.3f}s (final truth {truth:.1f}s); {unknown} queried right after a "
        "commit with no timestamp"
    )
    assert truth > 2.0  # it really fell behind
    assert worst < 1.0
    # The client side counted it all (plain ints, exported at scrape time).
    text = generate_latest(REGISTRY).decode()
    for needle in (
        f'streamplane_client_produced_total{{lane="realtime",stream="{stream}"}}',
        f'streamplane_client_acked_total{{lane="realtime",stream="{stream}"}}',
        f'streamplane_client_consumed_total{{cluster="local-a",partition="0",stream="{stream}"',
        "streamplane_client_commits_total{bootstrap=",
        "streamplane_client_fetch_latency_seconds_bucket",
        "streamplane_client_produce_latency_seconds_bucket",
    ):
        assert needle in text, needle


def test_a_commit_shows_in_metrics_within_a_second(
    control_plane: ControlPlaneProcess,
    fleet: FleetDescriptor,
    topic_factory: Callable[..., str],
) -> None:
    topic = topic_factory("local-a")
    group = unique("metrics")
    bootstrap = fleet.bootstrap("local-a")
    delays = []
    for offset in (1, 2, 3):
        meta = encode(
            PartitionProgress(
                low_watermark=offset,
                commit_time_ms=int(time.time() * 1000),
                low_watermark_timestamp_ms=int(time.time() * 1000) - 5_000,
            )
        ).metadata
        commit(bootstrap, group, topic, 0, offset, meta)
        committed_at = time.monotonic()

        def seen(want: int = offset) -> bool:
            text = httpx.get(f"{control_plane.url}/metrics", timeout=5).text
            value = metric_value(
                text, "streamplane_group_committed_offset", group=group, topic=topic
            )
            return value == want

        wait_for(f"offset {offset} in /metrics", seen, 10)
        delays.append(time.monotonic() - committed_at)
    print(f"\ncommit -> /metrics: {', '.join(f'{d * 1000:.0f} ms' for d in delays)}")
    assert max(delays) < 1.0
    text = httpx.get(f"{control_plane.url}/metrics", timeout=5).text
    assert metric_value(text, "streamplane_group_time_lag_seconds", group=group) is not None
    assert 'streamplane_http_requests_total{method="GET",route="/metrics"' in text


def test_two_clusters_at_once_and_a_restart_resumes_from_the_snapshot(
    control_plane: ControlPlaneProcess,
    fleet: FleetDescriptor,
    topic_factory: Callable[..., str],
) -> None:
    group = unique("two")
    topics = {c: topic_factory(c) for c in ("local-a", "local-b")}
    for cluster, topic in topics.items():
        commit(fleet.bootstrap(cluster), group, topic, 0, 7)

    def both() -> bool:
        groups = httpx.get(f"{control_plane.url}/v1/groups", timeout=5).json()
        mine = [g for g in groups if g["group"] == group]
        return bool(mine) and mine[0]["clusters"] == ["local-a", "local-b"]

    wait_for("the group on both clusters", both, 10)
    time.sleep(0.5)
    out = CliRunner().invoke(lag, ["--url", control_plane.url, "--group", group])
    assert out.exit_code == 0, out.output
    assert "local-a" in out.output and "local-b" in out.output and topics["local-b"] in out.output

    control_plane.stop()  # SIGTERM: the readers save their snapshots on the way out
    started = time.monotonic()
    control_plane.start()

    def readers_caught_up() -> list[dict[str, Any]] | None:
        every: list[dict[str, Any]] = httpx.get(
            f"{control_plane.url}/v1/lag/readers", timeout=5
        ).json()
        # Other tests of the session may have registered more clusters: look at ours.
        rs = [r for r in every if r["cluster"] in ("local-a", "local-b")]
        ok = len(rs) == 2 and all(r["caught_up"] for r in rs)
        return rs if ok else None

    readers = wait_for("readers caught up after the restart", readers_caught_up, 30)
    print(
        f"\nrestart to caught up: {time.monotonic() - started:.2f}s; "
        + "; ".join(
            f"{r['cluster']}: resumed={r['resumed_from_snapshot']} "
            f"snapshot commits={r['snapshot_commits']} read={r['records_read']} "
            f"catch-up={r['catch_up_s']:.3f}s"
            for r in readers
        )
    )
    assert all(r["resumed_from_snapshot"] for r in readers)
    # The group's commits came back from the snapshot, not from rereading the topic.
    doc = _lag(control_plane, group=group)
    assert {p["cluster"] for p in doc["partitions"]} == {"local-a", "local-b"}
    # Resuming reads only what was written since the snapshot, never the whole topic
    # (other tests of the session keep committing, so "since" is not always zero).
    for r in readers:
        total = offsets_topic_records(fleet.bootstrap(str(r["cluster"])))
        assert r["records_read"] < total, (r, total)


def offsets_topic_records(bootstrap: str) -> int:
    """How many records __consumer_offsets holds now (end minus start, all partitions)."""
    from confluent_kafka import Consumer, TopicPartition

    from streamplane.kafka.admin import KafkaAdmin

    parts = KafkaAdmin(bootstrap).metadata().topics["__consumer_offsets"].partitions
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "sp-test-count", "log_level": 0})
    try:
        total = 0
        for p in parts:
            low, high = c.get_watermark_offsets(TopicPartition("__consumer_offsets", p), 10)
            total += high - low
        return total
    finally:
        c.close()
