"""The streamplane Spark source and writer against the real fleet and control plane."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from streamplane.client.commit_store import CommitStore
from streamplane.client.producer import StreamProducer
from streamplane.core.commitlog import decode
from streamplane.kafka.clients import consumer_config
from streamplane.local.control_plane_process import ControlPlaneProcess
from streamplane.local.fleet import FleetDescriptor


def _read_all(spark: Any, options: dict[str, str], checkpoint: Path, name: str) -> Any:
    reader = spark.readStream.format("streamplane")
    for k, v in options.items():
        reader = reader.option(k, v)
    query = (
        reader.load()
        .writeStream.format("memory")
        .queryName(name)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(300)
    return query


def test_source_reads_lanes_and_commits_the_group(
    spark: Any,
    control_plane: ControlPlaneProcess,
    stream_factory: Callable[..., str],
    fleet: FleetDescriptor,
    tmp_path: Path,
) -> None:
    stream = stream_factory("local-a", partitions=2)
    group = f"g-{uuid.uuid4().hex[:8]}"
    with control_plane.client() as client, StreamProducer(stream, client) as producer:
        for i in range(300):
            producer.send(f"v{i}", key=f"k{i}", lane="realtime" if i % 3 else "bulk",
                          headers=[("h", b"1")])  # fmt: skip
    name = f"src_{uuid.uuid4().hex[:8]}"
    options = {
        "stream": stream,
        "group": group,
        "controlPlane": control_plane.url,
        "maxRecordsPerTrigger": "100",
    }
    query = _read_all(spark, options, tmp_path / "ck", name)
    rows = spark.sql(f"select * from {name}").collect()
    assert len(rows) == 300
    assert {r["value"].decode() for r in rows} == {f"v{i}" for i in range(300)}
    assert {r["lane"] for r in rows} == {"realtime", "bulk"}
    assert rows[0]["headers"][0]["key"] == "h" and rows[0]["timestamp"] is not None
    # Admission control: at most 100 rows per micro-batch, realtime served first.
    progress = [p for p in query.recentProgress if p["numInputRows"]]
    assert len(progress) >= 3 and max(p["numInputRows"] for p in progress) <= 100
    first = spark.sql(f"select lane, count(*) n from {name} group by lane").collect()
    assert {r["lane"]: r["n"] for r in first} == {"realtime": 200, "bulk": 100}

    # The group's commit log in Kafka: low watermark = end offset, streamplane metadata.
    bootstrap = fleet.bootstrap("local-a")
    with control_plane.client() as client:
        segments = [s for s in client.routing(stream).segments if s.lane != "dlq"]
    tps = [(s.topic, p) for s in segments for p in range(s.partitions)]
    consumer = Consumer(consumer_config(bootstrap, group))
    try:
        loaded = CommitStore(consumer, bootstrap, stream, group).load(tps)
        committed = consumer.committed([TopicPartition(t, p) for t, p in tps], timeout=10)
        for tp in committed:
            _, high = consumer.get_watermark_offsets(TopicPartition(tp.topic, tp.partition))
            assert tp.offset == high
            assert decode(tp.metadata).is_streamplane
            progress_, offset = loaded[(tp.topic, tp.partition)]
            assert offset == high and progress_ is not None and progress_.low_watermark == high
    finally:
        consumer.close()


def test_source_follows_a_failover(
    spark: Any,
    control_plane: ControlPlaneProcess,
    stream_factory: Callable[..., str],
    tmp_path: Path,
) -> None:
    stream = stream_factory("local-a", partitions=1, lanes=("realtime",))
    with control_plane.client() as client:
        with StreamProducer(stream, client) as producer:
            for i in range(50):
                producer.send(f"a{i}")
        client.failover(stream, "local-b")
        with StreamProducer(stream, client) as producer:
            for i in range(50):
                producer.send(f"b{i}")
    name = f"fo_{uuid.uuid4().hex[:8]}"
    options = {"stream": stream, "group": "g-fo", "controlPlane": control_plane.url}
    _read_all(spark, options, tmp_path / "ck", name)
    rows = spark.sql(f"select cluster, count(*) n from {name} group by cluster").collect()
    assert {r["cluster"]: r["n"] for r in rows} == {"local-a": 50, "local-b": 50}


def test_writer_sends_to_a_lane(
    spark: Any,
    control_plane: ControlPlaneProcess,
    stream_factory: Callable[..., str],
    tmp_path: Path,
) -> None:
    stream = stream_factory("local-a", partitions=1)
    df = spark.createDataFrame(
        [("k1", "one", "realtime"), ("k2", "two", "dlq")], "key string, value string, lane string"
    ).selectExpr("cast(key as binary) key", "cast(value as binary) value", "lane")
    df.write.format("streamplane").option("stream", stream).option(
        "controlPlane", control_plane.url
    ).option("token", control_plane.token).mode("append").save()
    name = f"w_{uuid.uuid4().hex[:8]}"
    options = {
        "stream": stream,
        "group": "g-w",
        "controlPlane": control_plane.url,
        "lanes": "realtime,bulk,dlq",
    }
    _read_all(spark, options, tmp_path / "ck", name)
    rows = spark.sql(f"select lane, cast(value as string) v from {name}").collect()
    assert sorted((r["lane"], r["v"]) for r in rows) == [("dlq", "two"), ("realtime", "one")]


@pytest.mark.parametrize(
    ("options", "needle"),
    [
        ({"stream": "no-such-stream", "group": "g"}, "unknown stream 'no-such-stream'"),
        ({"group": "g"}, "needs the option 'stream'"),
        ({"stream": "x"}, "needs the option 'group'"),
        ({"stream": "x", "group": "g", "maxRecordsPerTrigger": "-1"}, "maxRecordsPerTrigger"),
    ],
)
def test_bad_input_fails_at_load_on_the_driver(
    spark: Any, control_plane: ControlPlaneProcess, options: dict[str, str], needle: str
) -> None:
    reader = spark.readStream.format("streamplane").option("controlPlane", control_plane.url)
    for k, v in options.items():
        reader = reader.option(k, v)
    with pytest.raises(Exception, match=needle) as info:
        reader.load()
    assert "executor" not in str(info.value).lower()


def test_unknown_lane_and_unreachable_control_plane(
    spark: Any, control_plane: ControlPlaneProcess, stream_factory: Callable[..., str]
) -> None:
    stream = stream_factory("local-a", partitions=1)
    base = spark.readStream.format("streamplane").option("stream", stream).option("group", "g")
    with pytest.raises(Exception, match="has no lane 'nope'"):
        base.option("controlPlane", control_plane.url).option("lanes", "nope").load()
    with pytest.raises(Exception, match="unreachable"):
        base.option("controlPlane", "http://127.0.0.1:9").load()
