"""The streamplane Spark source against Spark's built-in Kafka source, and the pipeline's latency.

1. Throughput: one Kafka cluster, a stream with one lane of 4 partitions holding
   1,000,000 small JSON records. Each reader runs as a streaming query with the same
   trigger (``availableNow``) into the ``noop`` sink, after a warm-up on a small
   topic; rows/s is rows over the query's wall time. Baselines: Spark's built-in
   Kafka source (``spark-sql-kafka-0-10``, resolved by Maven from infra/spark/pom.xml)
   on the same topic, and raw confluent-kafka consumption (one consumer, every
   partition) as the client-side ceiling. Target: >= 0.8x the built-in source.
2. Latency: the telemetry job (trigger 1 s) on a stream fed at 5,000 events/s for
   15 s; p50/p99 of stored_at - ingestion time, from the event store.

    .venv/bin/python bench/spark_source.py [--records N] [--skip-latency] [--skip-throughput]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

from _stack import local_stack
from streamplane.client.producer import StreamProducer
from streamplane.kafka.clients import consume_available, consumer_config, producer_config
from streamplane.pipeline.generator import generate, produce
from streamplane.pipeline.spark import build_session
from streamplane.pipeline.telemetry import TelemetryConfig, TelemetryJob, store_summary

PARTITIONS = 4


def fill(bootstrap: str, topic: str, records: int) -> None:
    producer = Producer(producer_config(bootstrap, {"linger.ms": 20, "batch.size": 1 << 20}))
    for i in range(records):
        value = b'{"event_id":"%d","kind":"metric","service":"checkout","value":%d}' % (i, i % 97)
        while True:
            try:
                producer.produce(topic, value, str(i % 1024).encode(), partition=i % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 10_000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0


def raw_consume(bootstrap: str, topic: str, records: int) -> float:
    consumer = Consumer(consumer_config(bootstrap, "bench-raw", {"fetch.max.bytes": 64 << 20}))
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    seen = 0
    started = time.monotonic()
    while seen < records:
        for msg in consume_available(consumer, 10_000, 1.0):
            if msg.error() is None:
                msg.value()
                seen += 1
    elapsed = time.monotonic() - started
    consumer.close()
    return records / elapsed


def run_query(reader: Any, name: str) -> tuple[int, float]:
    started = time.monotonic()
    query = (
        reader.load()
        .writeStream.format("noop")
        .queryName(name)
        .option("checkpointLocation", tempfile.mkdtemp(prefix=f"ck-{name}-"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    elapsed = time.monotonic() - started
    rows = sum(int(p["numInputRows"]) for p in query.recentProgress)
    return rows, elapsed


def builtin(spark: Any, bootstrap: str, topic: str, name: str) -> tuple[int, float]:
    reader = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
    )
    return run_query(reader, name)


def streamplane(spark: Any, url: str, stream: str, name: str) -> tuple[int, float]:
    reader = (
        spark.readStream.format("streamplane")
        .option("stream", stream)
        .option("group", f"bench-{name}")
        .option("controlPlane", url)
        .option("startingOffsets", "earliest")
    )
    return run_query(reader, name)


def latency(spark: Any, stack: Any, seconds: float, rate: int) -> dict[str, Any]:
    stack.client.create_stream("bench-latency", "local-a", partitions=PARTITIONS)
    warehouse = Path(tempfile.mkdtemp(prefix="bench-wh-"))
    config = TelemetryConfig(
        stream="bench-latency",
        group="bench-latency",
        warehouse=warehouse,
        checkpoint=warehouse / "_ck",
        control_plane=stack.control_plane.url,
        token=stack.control_plane.token,
        trigger_seconds=1.0,
    )
    job = TelemetryJob(spark, config)
    query = job.start()
    try:
        with StreamProducer("bench-latency", stack.client) as producer:
            # Warm-up (first Delta writes, Python workers), not measured.
            produce(producer, generate(2_000, seed=3, rate=rate), rate=rate)
            query.processAllAvailable()
            count = int(seconds * rate)
            produce(producer, generate(count, seed=4, rate=rate), rate=rate)
        query.processAllAvailable()
    finally:
        query.stop()
        job.close()
    summary = store_summary(spark, warehouse)
    measured = (
        spark.read.format("delta")
        .load(str(warehouse / "events"))
        .where("event_id like '4-%'")
        .selectExpr("(cast(stored_at as double) - cast(ingest_ts as double)) * 1000 as ms")
        .selectExpr("percentile(ms, 0.5) p50", "percentile(ms, 0.99) p99", "count(*) n")
        .first()
    )
    return {**summary, "p50_ms": measured["p50"], "p99_ms": measured["p99"], "n": measured["n"]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--skip-latency", action="store_true")
    parser.add_argument("--skip-throughput", action="store_true")
    args = parser.parse_args()
    with local_stack(clusters=1) as stack:
        spark = build_session("bench-spark-source", master="local[2]")
        if not args.skip_throughput:
            throughput(spark, stack, args.records)
        if not args.skip_latency:
            summary = latency(spark, stack, 15.0, 5_000)
            print(
                f"produce -> stored at 5,000 events/s: p50 {summary['p50_ms']:.0f} ms, "
                f"p99 {summary['p99_ms']:.0f} ms ({summary['n']} events measured, "
                f"{summary['batches']} micro-batches in all)"
            )
        spark.stop()


def throughput(spark: Any, stack: Any, records: int) -> None:
    bootstrap = stack.fleet.bootstrap("local-a")
    for name, n in (("bench-warm", 20_000), ("bench-source", records)):
        table = stack.client.create_stream(
            name, "local-a", lanes=("realtime",), partitions=PARTITIONS
        )
        topic = table.active("realtime").topic
        started = time.monotonic()
        fill(bootstrap, topic, n)
        print(f"filled {topic}: {n} records in {time.monotonic() - started:.1f}s", flush=True)
    warm_topic = stack.client.routing("bench-warm").active("realtime").topic
    topic = stack.client.routing("bench-source").active("realtime").topic

    raw = raw_consume(bootstrap, topic, records)
    print(f"raw confluent-kafka: {raw:,.0f} rows/s", flush=True)

    builtin(spark, bootstrap, warm_topic, "warm_builtin")
    streamplane(spark, stack.control_plane.url, "bench-warm", "warm_sp")
    b_rows, b_s = builtin(spark, bootstrap, topic, "builtin")
    s_rows, s_s = streamplane(spark, stack.control_plane.url, "bench-source", "sp")
    assert b_rows == s_rows == records, (b_rows, s_rows)
    b_rate, s_rate = b_rows / b_s, s_rows / s_s
    print(f"spark built-in kafka source: {b_rate:,.0f} rows/s ({b_s:.1f}s)")
    print(f"streamplane source:          {s_rate:,.0f} rows/s ({s_s:.1f}s)")
    print(f"ratio streamplane / built-in: {s_rate / b_rate:.2f}x (target >= 0.80x)")
    print(f"ratio streamplane / raw confluent-kafka: {s_rate / raw:.2f}x")


if __name__ == "__main__":
    main()
