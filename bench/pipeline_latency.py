"""Produce -> stored latency of the telemetry job at 5,000 events/s, against a plain append.

One local Kafka cluster and a control plane (bench/_stack.py), one SparkSession
(local[2]). Each run creates a fresh stream (3 partitions, lanes realtime and bulk) and
warehouse, starts a query with a 1 s processing-time trigger, sends a warm-up of 2,000
events (not measured: first Delta writes, Python workers), then produces
``--seconds`` x ``--rate`` generated telemetry events (0.5% malformed) at a steady rate
and waits until everything is processed. Latency of an event is ``stored_at`` (the
time of the Delta write that stored it) minus ``ingest_ts`` (the Kafka record's
timestamp, set when the generator produced it); p50/p99 over every measured event.

Two jobs, run alternately in the same process, same stream layout and same trigger:

- ``telemetry``: the real job (``TelemetryJob``: validate, dlq lane, MERGE by event id
  into ``events``, rollup recompute, ``batches``);
- ``append`` (the baseline): the same source and the same parser, valid events
  appended to a Delta table in one commit per micro-batch, no MERGE, no dlq, no
  rollups: the floor of a Spark + Delta micro-batch on this machine.

Prints every run, the medians, and the telemetry/append ratios.

    .venv/bin/python bench/pipeline_latency.py [--runs 3] [--seconds 15] [--rate 5000]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from _stack import Stack, local_stack
from streamplane.client.producer import StreamProducer
from streamplane.pipeline.events import PARSED_SCHEMA_DDL, parse_batches
from streamplane.pipeline.generator import generate, produce
from streamplane.pipeline.spark import build_session
from streamplane.pipeline.telemetry import TelemetryConfig, TelemetryJob

PARTITIONS = 3
WARMUP = 2_000


class AppendJob:
    """The baseline: parse, keep the valid events, one Delta append per micro-batch."""

    def __init__(self, spark: Any, config: TelemetryConfig) -> None:
        self.spark = spark
        self.config = config

    def process_batch(self, batch: Any, batch_id: int) -> None:
        from pyspark.sql import functions as F

        (
            batch.mapInArrow(parse_batches, PARSED_SCHEMA_DDL)
            .where(F.col("reason").isNull())
            .select("event_id", "ts", "ingest_ts", F.current_timestamp().alias("stored_at"))
            .write.format("delta")
            .mode("append")
            .save(self.config.table("events"))
        )

    def start(self) -> Any:
        reader = self.spark.readStream.format("streamplane")
        for key, value in self.config.read_options().items():
            reader = reader.option(key, value)
        return (
            reader.load()
            .writeStream.foreachBatch(self.process_batch)
            .option("checkpointLocation", str(self.config.checkpoint))
            .trigger(processingTime=f"{self.config.trigger_seconds} seconds")
            .start()
        )

    def close(self) -> None:
        pass


def one_run(spark: Any, stack: Stack, kind: str, seconds: float, rate: int) -> dict[str, float]:
    stream = f"lat-{kind}-{uuid.uuid4().hex[:6]}"
    stack.client.create_stream(stream, "local-a", partitions=PARTITIONS)
    warehouse = Path(tempfile.mkdtemp(prefix=f"bench-lat-{kind}-"))
    config = TelemetryConfig(
        stream=stream,
        group=stream,
        warehouse=warehouse,
        checkpoint=warehouse / "_ck",
        control_plane=stack.control_plane.url,
        token=stack.control_plane.token,
        trigger_seconds=1.0,
    )
    job: Any = TelemetryJob(spark, config) if kind == "telemetry" else AppendJob(spark, config)
    query = job.start()
    started = time.monotonic()
    try:
        with StreamProducer(stream, stack.client) as producer:
            produce(producer, generate(WARMUP, seed=3, rate=rate), rate=rate)
            query.processAllAvailable()
            count = int(seconds * rate)
            gen = generate(count, seed=4, rate=rate, poison_ratio=0.005)
            produce(producer, gen, rate=rate)
        query.processAllAvailable()
    finally:
        query.stop()
        job.close()
    row = (
        spark.read.format("delta")
        .load(config.table("events"))
        .where("event_id like '4-%'")
        .selectExpr("(cast(stored_at as double) - cast(ingest_ts as double)) * 1000 as ms")
        .selectExpr("percentile(ms, 0.5) p50", "percentile(ms, 0.99) p99", "count(*) n")
        .first()
    )
    batches = len([p for p in query.recentProgress if p["numInputRows"]])
    return {
        "p50": float(row["p50"]),
        "p99": float(row["p99"]),
        "n": float(row["n"]),
        "batches": float(batches),
        "wall": time.monotonic() - started,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--rate", type=int, default=5_000)
    args = parser.parse_args()
    results: dict[str, list[dict[str, float]]] = {"append": [], "telemetry": []}
    with local_stack(clusters=1) as stack:
        spark = build_session("bench-pipeline-latency", master="local[2]")
        try:
            for i in range(args.runs):
                for kind in ("append", "telemetry"):
                    r = one_run(spark, stack, kind, args.seconds, args.rate)
                    results[kind].append(r)
                    print(
                        f"run {i + 1} {kind:9s}: p50 {r['p50']:8.0f} ms  p99 {r['p99']:8.0f} ms  "
                        f"({int(r['n'])} events, {int(r['batches'])} non-empty batches, "
                        f"{r['wall']:.0f} s)",
                        flush=True,
                    )
        finally:
            spark.stop()
    med = {
        kind: {q: statistics.median(r[q] for r in runs) for q in ("p50", "p99")}
        for kind, runs in results.items()
    }
    print(f"\nproduce -> stored at {args.rate:,} events/s, trigger 1 s, medians of {args.runs}:")
    for kind in ("append", "telemetry"):
        print(f"  {kind:9s}: p50 {med[kind]['p50']:8.0f} ms  p99 {med[kind]['p99']:8.0f} ms")
    print(
        f"  ratio telemetry / append (baseline): p50 "
        f"{med['telemetry']['p50'] / med['append']['p50']:.2f}x, p99 "
        f"{med['telemetry']['p99'] / med['append']['p99']:.2f}x"
    )


if __name__ == "__main__":
    main()
