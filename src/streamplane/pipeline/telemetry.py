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
   options (``txnAppId`` = the query, ``txnVersion`` = the batch id): a replay is skipped.

Every Delta write of a batch is keyed by the streaming query's id (Spark's, kept in the
checkpoint: the same across restarts of one checkpoint, new for a new checkpoint, even
at the same path) and the batch id. A replayed micro-batch (driver restart from the
checkpoint) does all of this again with the same offsets and changes nothing. Tables
live under ``--warehouse`` as Delta tables (``<warehouse>/<table>``).

``TelemetryJob.stop`` stops the query between micro-batches: a running batch may finish
(within a grace period), one Spark plans after the stop was asked for is not started,
and one the grace period runs out on is cut short, quietly (one line); either is done
at the next start from the checkpoint.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from os import PathLike
from pathlib import Path
from typing import Any

from streamplane.client.control_plane import ControlPlaneClient
from streamplane.client.producer import StreamProducer
from streamplane.client.provenance import dlq_headers, source_headers
from streamplane.core.routing import DLQ_LANE
from streamplane.pipeline.events import PARSED_SCHEMA_DDL, PERCENTILES, parse_batches
from streamplane.pipeline.source import FORMAT, preflight_read
from streamplane.pipeline.spark import start_query

log = logging.getLogger(__name__)

# Delta's idempotent DML: a MERGE run with these session confs records (app id, version)
# in the table's log and is skipped when that version was recorded before.
TXN_APP_ID_CONF = "spark.databricks.delta.write.txnAppId"
TXN_VERSION_CONF = "spark.databricks.delta.write.txnVersion"
# Spark sets this local property on the thread that runs a streaming query's micro-batches
# (``foreachBatch`` included): the query's id, which Spark keeps in the checkpoint
# (``<checkpoint>/metadata``).
QUERY_ID_PROPERTY = "sql.streaming.queryId"

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
    # ``replayed``: valid events of a batch replayed after a crash whose MERGE Delta had
    # committed already (not duplicates: they were sent once).
    "batches": (
        "app_id string, batch_id long, rows long, valid long, invalid long, inserted long, "
        "duplicates long, replayed long, dlq_sent long, processed_at timestamp"
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
        if self.max_records_per_trigger is not None:
            opts["maxRecordsPerTrigger"] = str(self.max_records_per_trigger)
        return opts


def ensure_tables(spark: Any, warehouse: str | PathLike[str]) -> None:
    """Create the Delta tables (empty) that do not exist yet, and add the columns a
    table written by an older streamplane lacks (e.g. ``batches.app_id``): an existing
    warehouse keeps working after an upgrade."""
    warehouse = Path(warehouse)
    for name in TABLES:
        path = str(warehouse / name)
        wanted = spark.createDataFrame([], _SCHEMAS[name]).schema
        if not _exists(spark, path):
            spark.createDataFrame([], wanted).write.format("delta").mode("ignore").save(path)
            continue
        have = {f.name for f in spark.read.format("delta").load(path).schema.fields}
        missing = [f for f in wanted.fields if f.name not in have]
        if missing:
            columns = ", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in missing)
            log.info("adding columns to %s: %s", path, columns)
            spark.sql(f"ALTER TABLE delta.`{path}` ADD COLUMNS ({columns})")


def _exists(spark: Any, path: str) -> bool:
    from delta.tables import DeltaTable

    return bool(DeltaTable.isDeltaTable(spark, path))


@dataclass(frozen=True)
class BatchReport:
    """What one micro-batch did: a row of ``batches`` and the job's progress line."""

    batch_id: int
    rows: int = 0
    valid: int = 0
    invalid: int = 0
    inserted: int = 0
    duplicates: int = 0  # valid events already stored or twice in the batch: dropped
    replayed: int = 0  # valid events of a replay whose MERGE was committed before the crash
    dlq_sent: int = 0
    seconds: float = 0.0
    skipped: bool = False  # recorded in ``batches`` already: nothing was done

    def line(self) -> str:
        if self.skipped:
            return f"batch {self.batch_id}: stored already (a replay), skipped"
        replayed = f", {self.replayed:,} replayed" if self.replayed else ""
        return (
            f"batch {self.batch_id}: {self.rows:,} records, {self.inserted:,} stored, "
            f"{self.invalid:,} dead letters, {self.duplicates:,} duplicates{replayed}, "
            f"{self.seconds:.1f}s"
        )


class BatchNotDone(Exception):
    """Raised from ``foreachBatch`` while the job stops: the micro-batch was not started
    (``started`` False) or was cut short. Spark does not commit it; the next start from
    the checkpoint does it again (the writes are idempotent).

    Its message and traceback are kept short on purpose: once a query is stopped, Spark
    matches a regular expression over the message of the error foreachBatch returns,
    and over the Java trace of a cancelled Spark job (tens of kilobytes) that overflowed
    the stack of Spark's stream thread: ~1,000 lines of ``java.lang.StackOverflowError``
    on stderr.
    """

    def __init__(self, batch_id: int, *, started: bool) -> None:
        self.batch_id = batch_id
        self.started = started
        what = "cut short by the stop" if started else "not started: the job is stopping"
        super().__init__(f"batch {batch_id} {what}; it is done at the next start")


def dimension_frame(spark: Any) -> Any:
    return spark.createDataFrame(list(DIM_SERVICES), "service string, team string, tier string")


class TelemetryJob:
    """Builds and runs the streaming query; ``process_batch`` is the foreachBatch body.

    ``on_batch`` is called with each micro-batch's ``BatchReport`` (the CLI prints it).
    """

    def __init__(
        self,
        spark: Any,
        config: TelemetryConfig,
        on_batch: Callable[[BatchReport], None] | None = None,
    ) -> None:
        self.spark = spark
        self.config = config
        self.on_batch = on_batch
        self.stats = {
            "batches": 0, "rows": 0, "inserted": 0, "duplicates": 0, "replayed": 0,
            "dlq_sent": 0, "replays_skipped": 0,
        }  # fmt: skip
        # Seconds spent in each step of the last micro-batch (for logs and benchmarks).
        self.timings: dict[str, float] = {}
        self._producer: StreamProducer | None = None
        self._client: ControlPlaneClient | None = None
        self._dim: Any = None
        self._dead: set[tuple[Any, ...]] | None = None
        # The idempotence key of the query being run (``app_id``) and the highest batch
        # id it has recorded; both follow the query that runs the batch.
        self._app_id: str | None = None
        self._done_through: int | None = None
        # Stopping (``stop``): once asked, a batch Spark starts is refused; once cutting,
        # the running batch's error (Spark cancelled its jobs) is reported short.
        self._stopping = threading.Event()
        self._cutting = threading.Event()
        # The batch in ``process_batch`` now: (batch id, time.monotonic() at its start).
        self.running: tuple[int, float] | None = None
        self.cut_short: int | None = None  # the batch the stop cut short
        self.not_started: int | None = None  # the batch refused because the job stops

    # -------------------------------------------------------------- life cycle
    def prepare(self) -> None:
        """Check the input (one clear error) and create the tables that are missing."""
        preflight_read(self.config.read_options())
        ensure_tables(self.spark, self.config.warehouse)
        self._dim = dimension_frame(self.spark)

    def start(self, *, available_now: bool = False) -> Any:
        """``prepare``, then start the query (``spark.start_query``: started again if it
        dies opening its source because Spark's Python source process was late)."""
        self.prepare()
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
        return start_query(writer)

    def stop(
        self,
        query: Any,
        *,
        grace_s: float = 60.0,
        reason: str = "stop asked",
        cut_now: threading.Event | None = None,
        say: Callable[[str], None] = log.info,
        note_every_s: float = 10.0,
    ) -> None:
        """Stop ``query`` (started by ``start``) between micro-batches, quietly.

        A batch running when this is called may finish: ``say`` tells so in one line,
        then every ``note_every_s`` seconds while it runs. It is cut short once
        ``grace_s`` has passed (0: at once) or ``cut_now`` is set (a second Ctrl-C):
        Spark cancels its jobs, its log is silenced meanwhile, and ``say`` tells in one
        line that the batch is done again at the next start. A batch Spark starts after
        this was called is refused before it does anything (``not_started``). Raises
        the query's own error if it failed otherwise meanwhile.
        """
        self._stopping.set()
        spark_log = _SparkLog(self.spark)
        # A refused batch ends the query with an error of ours: no Spark trace for it;
        # and Spark warns that a stopped query had no job to cancel.
        for name in _STOP_LOGGERS:
            spark_log.silence(name)
        why_cut = ""
        try:
            running = self.running
            if running is not None and query.isActive:
                why_cut = self._let_finish(query, running, grace_s, reason, cut_now, say,
                                           note_every_s)  # fmt: skip
            else:
                say(f"{reason}: stopping the telemetry job")
            if query.isActive and self.running is None:
                self._wait_for_trigger_end(query)
            if self.running is not None and query.isActive:
                self._cutting.set()
                spark_log.silence("")  # the cancelled jobs' warnings and errors
            query.stop()
            spark_log.settle(self.spark)
        finally:
            spark_log.restore()
        if self.cut_short is not None:
            say(
                f"batch {self.cut_short} cut short{why_cut}: not committed, it is done again "
                "at the next start"
            )
        elif self.not_started is not None:
            say(
                f"batch {self.not_started} not started (Spark planned it as the job "
                "stopped): it is done at the next start"
            )
        else:
            error = query.exception()
            if error is not None:
                raise error

    def _let_finish(
        self,
        query: Any,
        running: tuple[int, float],
        grace_s: float,
        reason: str,
        cut_now: threading.Event | None,
        say: Callable[[str], None],
        note_every_s: float,
    ) -> str:
        """Wait for the running batch to end, within ``grace_s``; returns why it is to
        be cut short ("" once it ended)."""
        batch_id, since = running
        now = time.monotonic()
        until = now + grace_s
        if grace_s <= 0:
            return f" ({reason}, no grace period)"
        say(
            f"{reason}: batch {batch_id} is running ({now - since:.0f}s so far); letting it "
            f"finish, for up to {grace_s:g}s"
        )
        next_note = now + note_every_s
        while self.running == running and query.isActive:
            now = time.monotonic()
            if cut_now is not None and cut_now.is_set():
                return " on request"
            if now >= until:
                return f" (the {grace_s:g}s grace period ran out, {now - since:.0f}s in)"
            if now >= next_note:
                next_note = now + note_every_s
                say(
                    f"still waiting for batch {batch_id}: {now - since:.0f}s in, "
                    f"{until - now:.0f}s of the grace period left"
                )
            time.sleep(0.1)
        return ""

    @staticmethod
    def _wait_for_trigger_end(query: Any, timeout_s: float = 10.0) -> None:
        """Wait (bounded) until Spark has committed the batch that just ended: stopped
        then, the query ends between two batches."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and query.isActive:
            try:
                if not query.status["isTriggerActive"]:
                    return
            except Exception:  # the query ended meanwhile
                return
            time.sleep(0.05)

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

    def _table(self, name: str) -> Any:
        return self.spark.read.format("delta").load(self.config.table(name))

    # -------------------------------------------------------------- the batch
    def process_batch(self, batch: Any, batch_id: int) -> None:
        """One micro-batch; a batch id this query has already recorded is skipped.

        While the job stops (``stop``), a new batch raises ``BatchNotDone`` before doing
        anything, and so does the running one once the stop cuts it short."""
        if self._stopping.is_set():
            self.not_started = batch_id
            raise BatchNotDone(batch_id, started=False)
        started = time.monotonic()
        self.running = (batch_id, started)
        try:
            report = self._process(batch, batch_id)
        except Exception:
            if not self._cutting.is_set():
                raise
            self.cut_short = batch_id
            # ``from None``: the cancelled Spark job's trace stays out of the message.
            raise BatchNotDone(batch_id, started=True) from None
        finally:
            self.running = None
        if report is None:
            return
        report = replace(report, seconds=time.monotonic() - started)
        if self.on_batch is not None:
            self.on_batch(report)

    def _process(self, batch: Any, batch_id: int) -> BatchReport | None:
        """The batch's work; ``None`` for an empty batch."""
        from pyspark.sql import functions as F

        if self._dim is None:
            self.prepare()
        self._follow_query()
        if self.done(batch_id):
            # A replay after a driver restart (Spark re-runs the last planned batch when
            # the driver died before committing it): everything is stored already.
            log.info("batch %d of %s already stored: skipped", batch_id, self._app_id)
            self.stats["replays_skipped"] += 1
            return BatchReport(batch_id, skipped=True)
        timings: dict[str, float] = {}
        clock = _Clock(timings)
        parsed = batch.mapInArrow(parse_batches, PARSED_SCHEMA_DDL).persist()
        try:
            # One pass (it fills the cache) for the counts and the minutes the valid
            # events touch.
            is_valid = F.col("reason").isNull()
            head = parsed.agg(
                F.count("*").alias("rows"),
                F.count_if(is_valid).alias("valid"),
                F.min(F.when(is_valid, F.col("ts"))).alias("first"),
                F.max(F.when(is_valid, F.col("ts"))).alias("last"),
            ).first()
            clock.lap("read")
            rows, valid_count = int(head["rows"]), int(head["valid"])
            if rows == 0:
                return None
            invalid_count = rows - valid_count
            inserted = replayed = 0
            # The events first: their store time is the pipeline's latency.
            if valid_count:
                fresh = self._fresh(parsed.where(is_valid))
                merged = self._merge_events(fresh, batch_id)
                if merged is None:
                    # Delta skipped the MERGE: this batch stored its events before the
                    # driver died. They are replays, not duplicates.
                    replayed = fresh.count()
                else:
                    inserted = merged
                clock.lap("merge")
            dlq_sent = 0
            if invalid_count:
                dlq_sent = self._dead_letter(parsed.where(F.col("reason").isNotNull()), batch_id)
                clock.lap("dlq")
            if valid_count:
                self._rollups(_minute_ms(head["first"]), _minute_ms(head["last"]), batch_id)
                clock.lap("rollups")
            report = BatchReport(
                batch_id,
                rows=rows,
                valid=valid_count,
                invalid=invalid_count,
                inserted=inserted,
                duplicates=valid_count - inserted - replayed,
                replayed=replayed,
                dlq_sent=dlq_sent,
            )
            self._record_batch(report)
            clock.lap("record")
            self._done_through = batch_id
            self.stats["batches"] += 1
            for name in ("rows", "inserted", "duplicates", "replayed", "dlq_sent"):
                self.stats[name] += getattr(report, name)
            return report
        finally:
            parsed.unpersist()
            self.timings = timings
            log.info("batch %d: %s", batch_id,
                     ", ".join(f"{k} {v:.2f}s" for k, v in timings.items()))  # fmt: skip

    def _follow_query(self) -> None:
        """Key this batch's writes by the streaming query running it.

        The query id is Spark's: kept in the checkpoint, the same for every restart of
        it, new for a new checkpoint (even at the same path, whose batch ids start at 0
        again: keyed by the path, they were taken for the old query's and skipped).
        """
        query_id = self.spark.sparkContext.getLocalProperty(QUERY_ID_PROPERTY)
        if not query_id:
            raise RuntimeError(
                "process_batch runs as a streaming query's foreachBatch: "
                f"no {QUERY_ID_PROPERTY} on this thread"
            )
        current = app_id(self.config.stream, query_id)
        if current != self._app_id:
            self._app_id = current
            self._done_through = None

    def done(self, batch_id: int) -> bool:
        """Whether the running query has recorded ``batch_id`` in ``batches``.

        Read from the table once per query (a restarted driver learns where it was),
        then kept in memory.
        """
        from pyspark.sql import functions as F

        if self._done_through is None:
            last = (
                self._table("batches")
                .where(F.col("app_id") == self._app_id)
                .agg(F.max("batch_id"))
                .first()[0]
            )
            self._done_through = -1 if last is None else int(last)
        return batch_id <= self._done_through

    def _fresh(self, valid: Any) -> Any:
        """Valid events, deduplicated within the batch and enriched, in the table's shape."""
        from pyspark.sql import functions as F

        return (
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

    def _merge_events(self, fresh: Any, batch_id: int) -> int | None:
        """MERGE into ``events`` on ``event_id``, insert only; returns the rows inserted,
        or None when Delta skipped the MERGE (this batch id's MERGE is in the table).

        The MERGE carries the batch id as its Delta transaction version (the session
        confs of Delta's idempotent DML), so a replayed batch whose MERGE was committed
        is skipped by Delta itself. The event id stays the guarantee: whatever is
        replayed, an event id already stored is never inserted again.
        """
        from delta.tables import DeltaTable

        table = DeltaTable.forPath(self.spark, self.config.table("events"))
        conf = self.spark.conf
        conf.set(TXN_APP_ID_CONF, self._app_id)
        conf.set(TXN_VERSION_CONF, str(batch_id))
        try:
            result = (
                table.alias("t")
                .merge(fresh.alias("s"), "t.event_id = s.event_id")
                .whenNotMatchedInsertAll()
                .execute()
            )
        finally:
            conf.unset(TXN_APP_ID_CONF)
            conf.unset(TXN_VERSION_CONF)
        metrics = result.first() if result is not None else None
        if metrics is None or "num_inserted_rows" not in metrics.asDict():
            return None  # skipped by Delta: this batch's MERGE is in the table already
        return int(metrics["num_inserted_rows"])

    def _append_once(self, name: str, frame: Any, batch_id: int) -> None:
        """Append, skipped by Delta when this query appended this batch id before."""
        (
            frame.write.format("delta")
            .mode("append")
            .option("txnAppId", self._app_id)
            .option("txnVersion", batch_id)
            .save(self.config.table(name))
        )

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
            done = self._table("dead_letters").select(*keys).collect()
            self._dead = {tuple(r) for r in done}
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
            headers = dlq_headers(
                source_headers(
                    cfg.stream, row["lane"], row["cluster"], row["topic"], row["partition"]
                ),
                None,
                offset=row["offset"],
                attempts=1,
                error=row["reason"],
                first_seen_ms=(int(row["ingest_ts"].timestamp() * 1000) if row["ingest_ts"] else 0),
            )
            producer.send(row["value"], key=row["key"], headers=headers, lane=DLQ_LANE)
        producer.flush()
        frame = self.spark.createDataFrame(rows, invalid.select(*cols).schema).withColumn(
            "dead_lettered_at", F.current_timestamp()
        )
        self._append_once("dead_letters", frame, batch_id)
        self._dead.update(tuple(r[k] for k in keys) for r in rows)
        return len(rows)

    def _rollups(self, first_minute_ms: int, last_minute_ms: int, batch_id: int) -> None:
        """Recompute the rollups of the minutes [first, last] from the stored events and
        replace those minutes in ``rollups`` (Delta ``replaceWhere``, one commit).

        One scan and one aggregation for the three rollups: events are grouped by
        (kind, minute, service, dim), where dim is the level of a log, the name of a
        metric and nothing for a span; each aggregate only sees its kind's non-null
        column (metric values, span durations).
        """
        from pyspark.sql import functions as F

        window = (
            f"minute >= timestamp_millis({first_minute_ms}) "
            f"AND minute <= timestamp_millis({last_minute_ms})"
        )
        kind = F.col("kind")
        is_span = kind == "span"
        is_metric = kind == "metric"
        dim = F.when(kind == "log", F.col("level")).when(is_metric, F.col("metric_name"))
        quantiles = F.array(*(F.lit(q) for q in PERCENTILES))
        grouped = (
            self._table("events")
            .where(window)
            .groupBy("kind", "minute", "service", dim.alias("dim"))
            .agg(
                F.count("*").alias("count"),
                F.sum("metric_value").alias("sum"),
                F.min("metric_value").alias("min"),
                F.max("metric_value").alias("max"),
                F.avg("metric_value").alias("avg"),
                F.count_if(F.col("status") == "error").alias("errors"),
                F.percentile("duration_ms", quantiles).alias("p"),
            )
        )
        null_d = F.lit(None).cast("double")
        frame = grouped.select(
            F.when(kind == "log", "log_counts")
            .when(is_metric, "metric_rollups")
            .otherwise("span_latency")
            .alias("rollup"),
            "minute", "service", "dim", "count",
            *(F.when(is_metric, F.col(c)).otherwise(null_d).alias(c)
              for c in ("sum", "min", "max", "avg")),
            F.when(is_span, F.col("errors")).otherwise(F.lit(None).cast("long")).alias("errors"),
            *(F.when(is_span, F.col("p")[i]).otherwise(null_d).alias(c)
              for i, c in enumerate(("p50", "p95", "p99"))),
        )  # fmt: skip
        (
            frame.write.format("delta")
            .mode("overwrite")
            .option("replaceWhere", window)
            .option("txnAppId", self._app_id)
            .option("txnVersion", batch_id)
            .save(self.config.table("rollups"))
        )

    def _record_batch(self, report: BatchReport) -> None:
        from pyspark.sql import functions as F

        columns = ("batch_id", "rows", "valid", "invalid", "inserted", "duplicates",
                   "replayed", "dlq_sent")  # fmt: skip
        counts = asdict(report)
        row = self.spark.createDataFrame(
            [(self._app_id, *(counts[c] for c in columns))],
            "app_id string, " + ", ".join(f"{c} long" for c in columns),
        ).withColumn("processed_at", F.current_timestamp())
        self._append_once("batches", row, report.batch_id)


# Silenced while the job stops: Spark's streaming execution, which logs a query's error
# with its trace (4.0: ``…streaming.MicroBatchExecution``, 4.2:
# ``…streaming.runtime.MicroBatchExecution``), and the scheduler, which warns "Failed to
# cancel job group …" whenever a stopped query has no job running.
_STOP_LOGGERS = (
    "org.apache.spark.sql.execution.streaming",
    "org.apache.spark.scheduler.DAGScheduler",
)


class _SparkLog:
    """Silences Spark's (log4j 2) loggers for a while, then puts their levels back.

    Best effort: a driver without log4j 2 reachable through Py4J keeps its log."""

    def __init__(self, spark: Any) -> None:
        self._saved: dict[str, Any] = {}
        try:
            jvm = spark.sparkContext._jvm
            self._configurator = jvm.org.apache.logging.log4j.core.config.Configurator
            self._manager = jvm.org.apache.logging.log4j.LogManager
            self._off = jvm.org.apache.logging.log4j.Level.OFF
        except Exception:
            self._configurator = None

    def silence(self, name: str) -> None:
        """Turn logger ``name`` off ("" is the root logger)."""
        if self._configurator is None or name in self._saved:
            return
        try:
            logger = self._manager.getRootLogger() if not name else self._manager.getLogger(name)
            self._saved[name] = logger.getLevel()
            self._configurator.setLevel(name, self._off)
        except Exception:
            log.debug("cannot silence Spark's logger %r", name, exc_info=True)

    def settle(self, spark: Any, timeout_s: float = 5.0) -> None:
        """Wait (bounded) for what Spark logs after a query has stopped: the scheduler
        handles the stop's job-group cancellation on its own thread (and warns when
        there was no job), and cancelled jobs report their tasks killed."""
        if not self._saved:
            return
        deadline = time.monotonic() + timeout_s
        try:
            tracker = spark.sparkContext.statusTracker()
            while tracker.getActiveJobsIds() and time.monotonic() < deadline:
                time.sleep(0.1)
        except Exception:
            pass
        time.sleep(1.0)

    def restore(self) -> None:
        for name, level in reversed(list(self._saved.items())):
            try:
                self._configurator.setLevel(name, level)
            except Exception:
                log.debug("cannot restore Spark's logger %r", name, exc_info=True)
        self._saved.clear()


class _Clock:
    def __init__(self, into: dict[str, float]) -> None:
        self.into = into
        self.last = time.monotonic()

    def lap(self, name: str) -> None:
        now = time.monotonic()
        self.into[name] = now - self.last
        self.last = now


def app_id(stream: str, query_id: str) -> str:
    """The Delta transaction id of a query's writes: the stream and Spark's query id.

    A new checkpoint is a new query whose batch ids start again at 0, so it gets its
    own id (wherever it lives); a driver restarted on the same checkpoint keeps it.
    Streamplane before this version keyed by a hash of the checkpoint's path: those
    ``batches`` rows are never matched again (see docs/pipeline.md).
    """
    return f"streamplane-telemetry-{stream}-{query_id}"


def _minute_ms(ts: Any) -> int:
    millis = int(ts.timestamp() * 1000)
    return millis - millis % 60_000


# --------------------------------------------------------------------------- reading
def rollup_views(spark: Any, warehouse: str | PathLike[str]) -> dict[str, Any]:
    """The three rollups as DataFrames with their own column names."""
    warehouse = Path(warehouse)
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


def store_summary(spark: Any, warehouse: str | PathLike[str]) -> dict[str, Any]:
    """Counts from the event store (what ``streamplane run`` prints)."""
    warehouse = Path(warehouse)
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
        .agg(
            F.sum("duplicates").alias("duplicates"),
            F.sum("replayed").alias("replayed"),
            F.count("*").alias("batches"),
        )
        .first()
    )
    return {
        "stored": stored,
        "distinct_ids": distinct,
        "dead_letters": table("dead_letters").count(),
        "duplicates_dropped": int(batches["duplicates"] or 0),
        "replayed": int(batches["replayed"] or 0),
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
