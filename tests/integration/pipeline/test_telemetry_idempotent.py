"""The telemetry writer is idempotent per micro-batch id, and MERGE by event id stays the
guarantee: real Spark, real Delta tables, the real dlq lane of a stream on the fleet.

The batches are DataFrames with the source's schema built in the test, handed to
``process_batch`` as Spark's foreachBatch would, on a thread that carries the running
query's id as Spark sets it (a new ``TelemetryJob`` under the same query id is a
restarted driver on the same checkpoint; a new query id, a new checkpoint). The last
test runs real queries.
"""

from __future__ import annotations

import datetime as dt
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from delta.tables import DeltaTable

from streamplane.client.dlq import list_dead_letters
from streamplane.client.producer import StreamProducer
from streamplane.local.control_plane_process import ControlPlaneProcess
from streamplane.pipeline.events import PARSED_SCHEMA_DDL, parse_batches, reference_rollups
from streamplane.pipeline.generator import GeneratedRecord, generate, produce
from streamplane.pipeline.source import SCHEMA
from streamplane.pipeline.telemetry import (
    QUERY_ID_PROPERTY,
    TABLES,
    BatchReport,
    TelemetryConfig,
    TelemetryJob,
    rollup_views,
    store_summary,
)
from tests.integration.pipeline.conftest import telemetry_config


def _batch(spark: Any, stream: str, records: list[GeneratedRecord], first_offset: int) -> Any:
    now = dt.datetime.now(dt.UTC)
    rows = [
        (stream, r.lane, "local-a", "t-coords", 0, first_offset + i, r.key, r.value, None, now)
        for i, r in enumerate(records)
    ]
    return spark.createDataFrame(rows, SCHEMA)


@pytest.fixture
def as_query(spark: Any) -> Iterator[Callable[[str], None]]:
    """``as_query(id)``: batches handed to ``process_batch`` on this thread belong to the
    streaming query ``id`` (Spark sets the property on the thread running a query's
    micro-batches)."""
    yield lambda query_id: spark.sparkContext.setLocalProperty(QUERY_ID_PROPERTY, query_id)
    spark.sparkContext.setLocalProperty(QUERY_ID_PROPERTY, None)


def _version(spark: Any, table: str) -> int:
    last = DeltaTable.forPath(spark, table).history(1).first()
    assert last is not None, f"{table} has no history"
    return int(last["version"])


def _versions(spark: Any, config: TelemetryConfig) -> dict[str, int]:
    return {name: _version(spark, config.table(name)) for name in TABLES}


def test_a_replayed_batch_does_no_work_and_event_ids_stay_unique(
    spark: Any,
    control_plane: ControlPlaneProcess,
    stream_factory: Callable[..., str],
    tmp_path: Path,
    as_query: Callable[[str], None],
) -> None:
    stream = stream_factory("local-a", partitions=1)
    config = telemetry_config(control_plane, stream, "g-idem", tmp_path)
    records = list(generate(400, seed=21, poison_ratio=0.05, rate=1000))
    valid = [r for r in records if r.event is not None]
    poison = len(records) - len(valid)
    assert poison >= 5
    batch0 = _batch(spark, stream, records, 0)
    as_query("query-1")

    job = TelemetryJob(spark, config)
    job.process_batch(batch0, 0)
    assert job.stats["inserted"] == len(valid) and job.stats["dlq_sent"] == poison
    after0 = _versions(spark, config)
    job.close()

    # A restarted driver replays batch 0: skipped whole, no table gets a commit, no
    # record goes to the dlq lane again.
    job = TelemetryJob(spark, config)
    job.process_batch(batch0, 0)
    assert job.stats["replays_skipped"] == 1 and job.stats["batches"] == 0
    assert _versions(spark, config) == after0

    # The valid events again, as new records under a new batch id (at-least-once input,
    # a producer's retry): MERGE by event id inserts none of them.
    job.process_batch(_batch(spark, stream, valid, 400), 1)
    assert job.stats["inserted"] == 0 and job.stats["duplicates"] == len(valid)
    assert job.stats["dlq_sent"] == 0
    events = spark.read.format("delta").load(config.table("events"))
    assert events.count() == events.select("event_id").distinct().count() == len(valid)

    # A driver that died after batch 2's MERGE and before recording it: on replay,
    # Delta skips the MERGE (its transaction version is in the events table's log),
    # the rest of the batch is done once.
    more = list(generate(100, seed=22, rate=1000))
    batch2 = _batch(spark, stream, more, 800)
    fresh = job._fresh(batch2.mapInArrow(parse_batches, PARSED_SCHEMA_DDL).where("reason is null"))
    assert job._merge_events(fresh, 2) == len(more)
    merged = _versions(spark, config)
    job.close()
    reports: list[BatchReport] = []
    job = TelemetryJob(spark, config, on_batch=reports.append)
    job.process_batch(batch2, 2)
    after2 = _versions(spark, config)
    assert after2["events"] == merged["events"]  # no second MERGE commit
    assert after2["rollups"] == merged["rollups"] + 1
    assert after2["batches"] == merged["batches"] + 1
    # Its events were sent once: replayed, not duplicates (they were counted as such).
    assert job.stats["batches"] == 1 and job.stats["inserted"] == 0
    assert job.stats["replayed"] == len(more) and job.stats["duplicates"] == 0
    (report,) = reports
    assert (report.batch_id, report.rows, report.replayed, report.duplicates) == (2, 100, 100, 0)
    assert report.line().startswith("batch 2: 100 records, 0 stored, 0 dead letters, ")
    job.process_batch(batch2, 2)
    assert reports[-1].line() == "batch 2: stored already (a replay), skipped"
    job.close()
    summary = store_summary(spark, config.warehouse)
    assert summary["duplicates_dropped"] == len(valid) and summary["replayed"] == len(more)

    events = spark.read.format("delta").load(config.table("events"))
    ids = [r["event_id"] for r in events.select("event_id").collect()]
    assert sorted(ids) == sorted(r.key.decode() for r in valid + more)
    batches = spark.read.format("delta").load(config.table("batches"))
    assert sorted(r["batch_id"] for r in batches.select("batch_id").collect()) == [0, 1, 2]
    dead = spark.read.format("delta").load(config.table("dead_letters"))
    assert dead.count() == poison
    with control_plane.client() as client:
        in_lane = list_dead_letters(client, stream, limit=1_000, idle_s=2.0).letters
    assert len(in_lane) == poison
    ref = reference_rollups([r.event for r in valid + more if r.event is not None])
    logs = {
        (int(r["minute"].timestamp() * 1000), r["service"], r["level"]): r["count"]
        # (a str, as docs/pipeline.md writes it: a Path alone was taken)
        for r in rollup_views(spark, str(config.warehouse))["log_counts"].collect()
    }
    assert logs == ref.log_counts


def test_a_new_checkpoint_is_a_new_query(
    spark: Any,
    control_plane: ControlPlaneProcess,
    stream_factory: Callable[..., str],
    tmp_path: Path,
    as_query: Callable[[str], None],
) -> None:
    """Batch ids start again at 0 for a new checkpoint on the same warehouse, elsewhere
    or at the same path (deleted and created again): its batches are not mistaken for
    replays of the old query's."""
    stream = stream_factory("local-a", partitions=1)

    def config(checkpoint: str) -> TelemetryConfig:
        return telemetry_config(control_plane, stream, "g-idem2", tmp_path, checkpoint)

    generated = [list(generate(50, seed=seed, rate=1000)) for seed in (31, 32, 33)]
    runs = [("ck-1", "query-1"), ("ck-2", "query-2"), ("ck-1", "query-3")]
    for offset, ((checkpoint, query_id), records) in enumerate(zip(runs, generated, strict=True)):
        as_query(query_id)
        job = TelemetryJob(spark, config(checkpoint))
        job.process_batch(_batch(spark, stream, records, 50 * offset), 0)
        job.close()
        assert job.stats["replays_skipped"] == 0 and job.stats["inserted"] == 50, query_id
    events = spark.read.format("delta").load(config("ck-1").table("events"))
    assert events.count() == 150


def test_a_checkpoint_created_again_at_the_same_path_loses_nothing(
    spark: Any,
    control_plane: ControlPlaneProcess,
    stream_factory: Callable[..., str],
    tmp_path: Path,
) -> None:
    """Real queries: run the job, delete its checkpoint, produce, run it again. The new
    query (batch ids from 0 again, same path) was keyed like the old one: its batches
    were skipped as stored, the new events never stored nor dead-lettered, and the
    group's offsets committed past them."""
    stream = stream_factory("local-a", partitions=1)
    config = telemetry_config(control_plane, stream, "g-recreated", tmp_path)
    sent: list[GeneratedRecord] = []
    reports: list[BatchReport] = []
    with control_plane.client() as client, StreamProducer(stream, client) as producer:
        for seed in (41, 42):
            records = list(generate(300, seed=seed, poison_ratio=0.05, rate=1000))
            produce(producer, iter(records), rate=1e9)
            sent += records
            job = TelemetryJob(spark, config, on_batch=reports.append)
            query = job.start(available_now=True)
            try:
                assert query.awaitTermination(300), "the availableNow query did not end"
            finally:
                query.stop()
                job.close()
            shutil.rmtree(config.checkpoint)
    valid = {r.key.decode() for r in sent if r.event is not None}
    poison = {r.key.decode() for r in sent if r.event is None}
    events = spark.read.format("delta").load(config.table("events"))
    assert {r["event_id"] for r in events.select("event_id").collect()} == valid
    dead = spark.read.format("delta").load(config.table("dead_letters"))
    assert {bytes(r["key"]).decode() for r in dead.select("key").collect()} == poison
    assert [r.batch_id for r in reports] == [0, 0] and not any(r.skipped for r in reports)
    assert sum(r.inserted for r in reports) == len(valid)
    assert sum(r.dlq_sent for r in reports) == len(poison)


def test_a_warehouse_from_an_older_version_gets_the_new_columns(spark: Any, tmp_path: Path) -> None:
    from streamplane.pipeline.telemetry import ensure_tables

    old_batches = (
        "batch_id long, rows long, valid long, invalid long, inserted long, "
        "duplicates long, dlq_sent long, processed_at timestamp"
    )  # before batches carried the writer's app id
    path = str(tmp_path / "batches")
    spark.createDataFrame([(7, 1, 1, 0, 1, 0, 0, None)], old_batches).write.format("delta").save(
        path
    )
    ensure_tables(spark, tmp_path)
    table = spark.read.format("delta").load(path)
    assert "app_id" in table.columns
    (row,) = table.collect()
    assert row["batch_id"] == 7 and row["app_id"] is None  # old rows kept
    assert set(TABLES) <= {p.name for p in tmp_path.iterdir()}
