"""The telemetry job: stream -> parse/validate (bad -> dlq) -> enrich -> event store.

::

    streamplane pipeline telemetry --stream telemetry --group telemetry-job \\
        --warehouse .streamplane/warehouse --checkpoint .streamplane/checkpoints/telemetry

or on a cluster, through spark-submit::

    spark-submit --master spark://host:7077 src/streamplane/pipeline/telemetry.py --stream ...

Every micro-batch (``foreachBatch``):

1. the source's rows are parsed and validated by ``events.parse_batches`` (one
   validator for Spark and the tests, run through ``mapInArrow``);
2. invalid records not yet dead-lettered go to the stream's ``dlq`` lane with the
   ``sp-dlq-*`` provenance headers (the reason in ``sp-dlq-error``), then into the
   ``dead_letters`` table (an idempotent append, as in 5). A crash between the two
   sends them again (at-least-once; the headers name the source record, so a reader
   can drop the copy);
3. valid events, deduplicated within the batch and enriched from the dimension table
   ``DIM_SERVICES`` (team, tier), are MERGEd into ``events`` on ``event_id`` (insert
   when not matched): at-least-once input, each event stored once;
4. the rollups of the minutes the batch touched (first to last) are recomputed from
   ``events`` and replace those minutes of the ``rollups`` table (Delta
   ``replaceWhere``, one commit): ``log_counts`` (minute, service, level),
   ``metric_rollups`` (minute, service, metric name: count, sum, min, max, avg) and
   ``span_latency`` (minute, service: count, errors, exact p50/p95/p99).
   Recomputing from the stored events (not adding to old totals) keeps them exact
   across replays and late events; ``rollup_views`` splits the table in three;
5. the batch's counts are appended to ``batches`` with Delta's idempotent-write
   options (``txnAppId`` = the job, ``txnVersion`` = the batch id): a replay is skipped.

A replayed micro-batch (driver restart from the checkpoint) does all of this again
with the same offsets and changes nothing. Tables live under ``--warehouse`` as Delta
tables (``<warehouse>/<table>``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from streamplane.client.control_plane import ControlPlaneClient
from streamplane.client.producer import StreamProducer
from streamplane.client.provenance import dlq_headers
from streamplane.core.routing import DLQ_LANE
from streamplane.exceptions import ConfigError
from streamplane.pipeline.events import PARSED_SCHEMA_DDL, PERCENTILES, parse_batches
from streamplane.pipeline.source import FORMAT, preflight_read

TABLES = ("events", "dead_letters", "rollups", "batches")
ROLLUPS = ("log_counts", "metric_rollups", "span_latency")

# The dimension table: service -> owning team and tier (unknown services get "unknown").
DIM_SERVICES: tuple[tuple[str, str, str], ...] = (
    ("checkout", "storefront", "tier-1"),
    ("search", "discovery", "tier-1"),
    ("payments", "payments", "tier-0"),
    ("inventory", "supply", "tier-2"),
    ("auth", "identity", "tier-0"),
    ("recommendations", "discovery", "tier-2"),
    ("email", "messaging", "tier-3"),
)

_SCHEMAS = {
    "events": (
        "event_id string, kind string, ts timestamp, minute timestamp, service string, "
        "host string, team string, tier string, level string, message string, "
        "metric_name string, metric_value double, metric_unit string, trace_id string, "
        "span_id string, parent_id string, span_name string, duration_ms double, "
        "status string, cluster string, topic string, partition int, offset long, "
        "lane string, ingest_ts timestamp, stored_at timestamp"
    ),
    "dead_letters": (
        "cluster string, topic string, partition int, offset long, lane string, key binary, "
        "value binary, reason string, ingest_ts timestamp, dead_lettered_at timestamp"
    ),
    # The three rollups share one table (one Delta commit per micro-batch), told apart
    # by ``rollup``; ``rollup_views`` gives each its own columns.
    "rollups": (
        "rollup string, minute timestamp, service string, dim string, count long, "
        "sum double, min double, max double, avg double, errors long, p50 double, "
        "p95 double, p99 double"
    ),
    "batches": (
        "batch_id long, rows long, valid long, invalid long, inserted long, duplicates long, "
        "dlq_sent long, processed_at timestamp"
    ),
}


@dataclass(frozen=True)
class TelemetryConfig:
    stream: str
    group: str
    warehouse: Path
    checkpoint: Path
    control_plane: str
    token: str | None = None
    lanes: Sequence[str] | None = None
    max_records_per_trigger: int | None = None
    trigger_seconds: float = 2.0
    source_options: dict[str, str] = field(default_factory=dict)

    def table(self, name: str) -> str:
        return str(self.warehouse / name)

    def read_options(self) -> dict[str, str]:
        opts = {
            "stream": self.stream,
            "group": self.group,
            "controlPlane": self.control_plane,
            **self.source_options,
        }
        if self.token:
            opts["token"] = self.token
        if self.lanes:
            opts["lanes"] = ",".join(self.lanes)
        if self.max_records_per_trigger:
            opts["maxRecordsPerTrigger"] = str(self.max_records_per_trigger)
        return opts


def ensure_tables(spark: Any, warehouse: Path) -> None:
    """Create the Delta tables (empty) that do not exist yet (for readers)."""
    for name in TABLES:
        if not _exists(spark, str(warehouse / name)):
            df = spark.createDataFrame([], _SCHEMAS[name])
            df.write.format("delta").mode("ignore").save(str(warehouse / name))


def _exists(spark: Any, path: str) -> bool:
    from delta.tables import DeltaTable

    return bool(DeltaTable.isDeltaTable(spark, path))


def dimension_frame(spark: Any) -> Any:
    return spark.createDataFrame(list(DIM_SERVICES), "service string, team string, tier string")


@dataclass
class _DeadLetterSource:
    """The fields ``dlq_headers`` reads, for a row of the source."""

    stream: str
    lane: str
    cluster: str
    topic: str
    partition: int
    offset: int
    first_seen_ms: int
    headers: list[tuple[str, bytes]] | None = None


class TelemetryJob:
    """Builds and runs the streaming query; ``process_batch`` is the foreachBatch body."""

    def __init__(self, spark: Any, config: TelemetryConfig) -> None:
        self.spark = spark
        self.config = config
        self.stats = {"batches": 0, "rows": 0, "inserted": 0, "duplicates": 0, "dlq_sent": 0}
        self._producer: StreamProducer | None = None
        self._client: ControlPlaneClient | None = None
        self._existing: set[str] = set()
        self._dead: set[tuple[Any, ...]] | None = None
        self._app_id = f"streamplane-telemetry-{config.stream}"

    # -------------------------------------------------------------- life cycle
    def start(self, *, available_now: bool = False) -> Any:
        """Check the input (one clear error), create tables, start the query."""
        preflight_read(self.config.read_options())
        self._dim = dimension_frame(self.spark)
        reader = self.spark.readStream.format(FORMAT)
        for key, value in self.config.read_options().items():
            reader = reader.option(key, value)
        writer = (
            reader.load()
            .writeStream.foreachBatch(self.process_batch)
            .option("checkpointLocation", str(self.config.checkpoint))
            .queryName(f"telemetry-{self.config.stream}")
        )
        if available_now:
            writer = writer.trigger(availableNow=True)
        else:
            writer = writer.trigger(processingTime=f"{self.config.trigger_seconds} seconds")
        return writer.start()

    def close(self) -> None:
        if self._producer is not None:
            self._producer.close()
            self._producer = None
        if self._client is not None:
            self._client.close()
            self._client = None

    def _dlq_producer(self) -> StreamProducer:
        if self._producer is None:
            self._client = ControlPlaneClient(self.config.control_plane, self.config.token)
            self._producer = StreamProducer(self.config.stream, self._client, lane=DLQ_LANE)
            self._producer.open()
        return self._producer

    # -------------------------------------------------------------- table writes
    def _has(self, name: str) -> bool:
        if name not in self._existing and _exists(self.spark, self.config.table(name)):
            self._existing.add(name)
        return name in self._existing

    def _upsert(self, name: str, frame: Any, keys: Sequence[str], *, update: bool) -> int:
        """MERGE ``frame`` into the table on ``keys`` (create it on first write).

        Returns the number of rows inserted.
        """
        from delta.tables import DeltaTable

        path = self.config.table(name)
        if not self._has(name):
            frame = frame.persist()
            try:
                rows = frame.count()
                frame.write.format("delta").mode("append").save(path)
            finally:
                frame.unpersist()
            self._existing.add(name)
            return int(rows)
        table = DeltaTable.forPath(self.spark, path)
        cond = " AND ".join(f"t.{k} = s.{k}" for k in keys)
        merge = table.alias("t").merge(frame.alias("s"), cond)
        if update:
            merge = merge.whenMatchedUpdateAll()
        merge.whenNotMatchedInsertAll().execute()
        return _last_metric(table, "numTargetRowsInserted")

    def _append_once(self, name: str, frame: Any, batch_id: int) -> None:
        """Append, skipped by Delta when this batch id was appended before."""
        (
            frame.write.format("delta")
            .mode("append")
            .option("txnAppId", self._app_id)
            .option("txnVersion", batch_id)
            .save(self.config.table(name))
        )

    # -------------------------------------------------------------- the batch
    def process_batch(self, batch: Any, batch_id: int) -> None:
        from pyspark.sql import functions as F

        parsed = batch.mapInArrow(parse_batches, PARSED_SCHEMA_DDL).persist()
        try:
            # One pass for the counts and the minutes the valid events touch.
            is_valid = F.col("reason").isNull()
            head = parsed.agg(
                F.count("*").alias("rows"),
                F.count_if(is_valid).alias("valid"),
                F.min(F.when(is_valid, F.col("ts"))).alias("first"),
                F.max(F.when(is_valid, F.col("ts"))).alias("last"),
            ).first()
            rows, valid_count = int(head["rows"]), int(head["valid"])
            if rows == 0:
                return
            invalid_count = rows - valid_count
            dlq_sent = 0
            if invalid_count:
                dlq_sent = self._dead_letter(parsed.where(F.col("reason").isNotNull()), batch_id)
            valid = parsed.where(is_valid)
            fresh = (
                valid.dropDuplicates(["event_id"])
                .join(F.broadcast(self._dim), "service", "left")
                .select(
                    "event_id", "kind", "ts",
                    F.date_trunc("minute", "ts").alias("minute"),
                    "service", "host",
                    F.coalesce("team", F.lit("unknown")).alias("team"),
                    F.coalesce("tier", F.lit("unknown")).alias("tier"),
                    "level", "message", "metric_name", "metric_value", "metric_unit",
                    "trace_id", "span_id", "parent_id", "span_name", "duration_ms", "status",
                    "cluster", "topic", "partition", "offset", "lane", "ingest_ts",
                    F.current_timestamp().alias("stored_at"),
                )
            )  # fmt: skip
            inserted = 0
            if valid_count:
                inserted = self._upsert("events", fresh, ["event_id"], update=False)
                self._rollups(_minute_ms(head["first"]), _minute_ms(head["last"]))
            duplicates = valid_count - inserted
            self._record_batch(batch_id, rows, valid_count, invalid_count, inserted, duplicates,
                               dlq_sent)  # fmt: skip
            self.stats["batches"] += 1
            self.stats["rows"] += rows
            self.stats["inserted"] += inserted
            self.stats["duplicates"] += duplicates
            self.stats["dlq_sent"] += dlq_sent
        finally:
            parsed.unpersist()

    def _dead_letter(self, invalid: Any, batch_id: int) -> int:
        """Send invalid records not dead-lettered before; returns how many were sent.

        The coordinates already dead-lettered are loaded once from ``dead_letters`` and
        kept in memory, so a replayed batch sends nothing twice (unless the driver died
        between sending and recording: at-least-once).
        """
        from pyspark.sql import functions as F

        cfg = self.config
        keys = ("cluster", "topic", "partition", "offset")
        if self._dead is None:
            self._dead = set()
            if self._has("dead_letters"):
                done = self.spark.read.format("delta").load(cfg.table("dead_letters"))
                self._dead = {tuple(r) for r in done.select(*keys).collect()}
        cols = (*keys, "lane", "key", "value", "reason", "ingest_ts")
        rows = [
            r
            for r in invalid.select(*cols).collect()
            if tuple(r[k] for k in keys) not in self._dead
        ]
        if not rows:
            return 0
        producer = self._dlq_producer()
        for row in rows:
            src = _DeadLetterSource(
                cfg.stream, row["lane"], row["cluster"], row["topic"], row["partition"],
                row["offset"], int(row["ingest_ts"].timestamp() * 1000) if row["ingest_ts"] else 0,
            )  # fmt: skip
            producer.send(
                row["value"],
                key=row["key"],
                headers=dlq_headers(src, attempts=1, error=row["reason"]),
                lane=DLQ_LANE,
            )
        producer.flush()
        frame = self.spark.createDataFrame(rows, invalid.select(*cols).schema).withColumn(
            "dead_lettered_at", F.current_timestamp()
        )
        self._append_once("dead_letters", frame, batch_id)
        self._dead.update(tuple(r[k] for k in keys) for r in rows)
        return len(rows)

    def _rollups(self, first_minute_ms: int, last_minute_ms: int) -> None:
        """Recompute the rollups of the minutes [first, last] from the stored events and
        replace those minutes in the rollup tables (Delta ``replaceWhere``)."""
        from pyspark.sql import functions as F

        cfg = self.config
        window = (
            f"minute >= timestamp_millis({first_minute_ms}) "
            f"AND minute <= timestamp_millis({last_minute_ms})"
        )
        events = self.spark.read.format("delta").load(cfg.table("events")).where(window)
        null_d = F.lit(None).cast("double")
        null_l = F.lit(None).cast("long")
        logs = (
            events.where(F.col("kind") == "log")
            .groupBy("minute", "service", F.col("level").alias("dim"))
            .agg(F.count("*").alias("count"))
            .select(
                F.lit("log_counts").alias("rollup"), "minute", "service", "dim", "count",
                *(null_d.alias(c) for c in ("sum", "min", "max", "avg")),
                null_l.alias("errors"), *(null_d.alias(c) for c in ("p50", "p95", "p99")),
            )
        )  # fmt: skip
        metrics = (
            events.where(F.col("kind") == "metric")
            .groupBy("minute", "service", F.col("metric_name").alias("dim"))
            .agg(
                F.count("*").alias("count"),
                F.sum("metric_value").alias("sum"),
                F.min("metric_value").alias("min"),
                F.max("metric_value").alias("max"),
                F.avg("metric_value").alias("avg"),
            )
            .select(
                F.lit("metric_rollups").alias("rollup"), "minute", "service", "dim", "count",
                "sum", "min", "max", "avg", null_l.alias("errors"),
                *(null_d.alias(c) for c in ("p50", "p95", "p99")),
            )
        )  # fmt: skip
        quantiles = F.array(*(F.lit(q) for q in PERCENTILES))
        spans = (
            events.where(F.col("kind") == "span")
            .groupBy("minute", "service")
            .agg(
                F.count("*").alias("count"),
                F.count_if(F.col("status") == "error").alias("errors"),
                F.percentile("duration_ms", quantiles).alias("p"),
            )
            .select(
                F.lit("span_latency").alias("rollup"), "minute", "service",
                F.lit(None).cast("string").alias("dim"), "count",
                *(null_d.alias(c) for c in ("sum", "min", "max", "avg")), "errors",
                F.col("p")[0].alias("p50"), F.col("p")[1].alias("p95"),
                F.col("p")[2].alias("p99"),
            )
        )  # fmt: skip
        frame = logs.unionByName(metrics).unionByName(spans)
        writer = frame.write.format("delta")
        if self._has("rollups"):
            writer = writer.mode("overwrite").option("replaceWhere", window)
        else:
            writer = writer.mode("append")
        writer.save(cfg.table("rollups"))
        self._existing.add("rollups")

    def _record_batch(self, batch_id: int, *counts: int) -> None:
        from pyspark.sql import functions as F

        row = self.spark.createDataFrame(
            [(batch_id, *counts)],
            "batch_id long, rows long, valid long, invalid long, inserted long, "
            "duplicates long, dlq_sent long",
        ).withColumn("processed_at", F.current_timestamp())
        self._append_once("batches", row, batch_id)


def _minute_ms(ts: Any) -> int:
    millis = int(ts.timestamp() * 1000)
    return millis - millis % 60_000


def _last_metric(table: Any, name: str) -> int:
    metrics = table.history(1).select("operationMetrics").first()[0] or {}
    try:
        return int(metrics.get(name, 0))
    except (TypeError, ValueError):
        raise ConfigError(f"Delta history has no usable {name}: {metrics!r}") from None


# --------------------------------------------------------------------------- reading
def rollup_views(spark: Any, warehouse: Path) -> dict[str, Any]:
    """The three rollups as DataFrames with their own column names."""
    from pyspark.sql import functions as F

    rollups = spark.read.format("delta").load(str(warehouse / "rollups"))

    def of(name: str) -> Any:
        return rollups.where(F.col("rollup") == name)

    return {
        "log_counts": of("log_counts").select(
            "minute", "service", F.col("dim").alias("level"), "count"
        ),
        "metric_rollups": of("metric_rollups").select(
            "minute", "service", F.col("dim").alias("name"), "count", "sum", "min", "max", "avg"
        ),
        "span_latency": of("span_latency").select(
            "minute", "service", "count", "errors", "p50", "p95", "p99"
        ),
    }


def store_summary(spark: Any, warehouse: Path) -> dict[str, Any]:
    """Counts from the event store (what ``streamplane run`` prints)."""
    from pyspark.sql import functions as F

    ensure_tables(spark, warehouse)

    def table(name: str) -> Any:
        return spark.read.format("delta").load(str(warehouse / name))

    events = table("events")
    stored = events.count()
    distinct = events.select("event_id").distinct().count()
    latency = events.select(
        ((F.col("stored_at").cast("double") - F.col("ingest_ts").cast("double")) * 1000).alias("ms")
    ).agg(
        F.percentile("ms", 0.5).alias("p50"),
        F.percentile("ms", 0.99).alias("p99"),
    )
    lat = latency.first()
    batches = (
        table("batches")
        .agg(F.sum("duplicates").alias("duplicates"), F.count("*").alias("batches"))
        .first()
    )
    return {
        "stored": stored,
        "distinct_ids": distinct,
        "dead_letters": table("dead_letters").count(),
        "duplicates_dropped": int(batches["duplicates"] or 0),
        "batches": int(batches["batches"] or 0),
        "store_latency_p50_ms": float(lat["p50"] or 0.0),
        "store_latency_p99_ms": float(lat["p99"] or 0.0),
    }


def wait_for(predicate: Any, timeout_s: float, poll_s: float = 1.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(poll_s)
    return bool(predicate())


def main() -> None:
    """``spark-submit .../telemetry.py --stream S ...``: the master comes from spark-submit."""
    import sys

    from streamplane.cli.pipeline import telemetry

    telemetry.main(args=["--master", "", *sys.argv[1:]], prog_name="telemetry")


if __name__ == "__main__":
    main()
