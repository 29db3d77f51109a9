"""The streamplane Spark source and writer against the real fleet and control plane."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable

from streamplane.client.commit_store import CommitStore
from streamplane.client.producer import StreamProducer
from streamplane.core.commitlog import decode
from streamplane.exceptions import KafkaError
from streamplane.kafka.clients import consumer_config, producer_config
from streamplane.local.control_plane_process import ControlPlaneProcess
from streamplane.local.fleet import FleetDescriptor
from streamplane.pipeline.options import parse_read_options
from streamplane.pipeline.planning import SourceOffset
from streamplane.pipeline.source import StreamplaneStreamReader
from tests.waiting import wait_for


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


def test_errors_as_docs_pipeline_md_describes_them(
    spark: Any, control_plane: ControlPlaneProcess, stream_factory: Callable[..., str]
) -> None:
    """The problem is on the line before the last (the last is ' SQLSTATE: 38000');
    a misspelt option is quoted lower-cased, as Spark passes it; a batch read fails at
    load() on bad options, else at its first action."""
    stream = stream_factory("local-a", partitions=1)
    options = {"stream": stream, "group": "g", "controlPlane": control_plane.url}
    reader = spark.readStream.format("streamplane").options(**options)
    with pytest.raises(Exception, match="PYTHON_DATA_SOURCE_ERROR") as info:
        reader.option("maxRecordPerTrigger", "9").load()
    *_, problem, last = str(info.value).splitlines()
    assert last == " SQLSTATE: 38000"
    assert problem.startswith("streamplane.exceptions.ConfigError: the streamplane source has ")
    assert "no option 'maxrecordpertrigger' (did you mean 'maxRecordsPerTrigger'?)" in problem
    assert "case-insensitive" in problem
    # load() checks the options and the stream for a batch read too (schema() cannot
    # tell the two apart): with good ones, the read fails at its first action.
    with pytest.raises(Exception, match="no option 'maxrecordpertrigger'"):
        spark.read.format("streamplane").options(**options, maxRecordPerTrigger="9").load()
    batch = spark.read.format("streamplane").options(**options).load()
    with pytest.raises(Exception, match=r"reads streams only: use spark\.readStream") as info:
        batch.count()
    assert str(info.value).splitlines()[-1] == " SQLSTATE: 38000"


def _hundred_records(
    control_plane: ControlPlaneProcess, stream_factory: Callable[..., str]
) -> dict[str, str]:
    """A one-partition stream holding 100 records; the source options of a new group."""
    stream = stream_factory("local-a", partitions=1, lanes=("realtime",))
    with control_plane.client() as client, StreamProducer(stream, client) as producer:
        for i in range(100):
            producer.send(f"v{i}")
    return {
        "stream": stream,
        "group": f"g-{uuid.uuid4().hex[:8]}",
        "controlPlane": control_plane.url,
        "token": control_plane.token,
    }


class UnansweredOnce:
    """A cluster's commit store whose first read of committed offsets fails, as when
    the group coordinator does not answer."""

    def __init__(self, store: CommitStore) -> None:
        self.store = store
        self.loads = 0

    def load(self, tps: Any, timeout_s: float = 30.0) -> Any:
        self.loads += 1
        if self.loads == 1:
            raise KafkaError("read committed offsets: Local: Timed out")
        return self.store.load(tps, timeout_s)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)


def test_a_new_query_waits_for_the_groups_progress_rather_than_rereading(
    control_plane: ControlPlaneProcess, stream_factory: Callable[..., str]
) -> None:
    """startingOffsets=committed: a partition whose committed offset cannot be read when
    a new query starts joins at that offset once it can, not at its beginning (which
    would read again everything the group had done)."""
    options = _hundred_records(control_plane, stream_factory)

    def reader() -> StreamplaneStreamReader:
        return StreamplaneStreamReader(parse_read_options(options))

    first = reader()
    try:
        start = SourceOffset.from_json(first.initialOffset())
        ((key, begin),) = start.partitions.items()
        assert begin == 0
        first.commit(SourceOffset(start.epoch, {key: 60}).to_json())  # the group's progress
    finally:
        first.stop()

    second = reader()
    try:
        store = UnansweredOnce(second._store("local-a"))
        second._stores["local-a"] = store  # type: ignore[assignment]
        initial = second.initialOffset()
        assert SourceOffset.from_json(initial).partitions == {}  # not joined at 0
        end = SourceOffset.from_json(second.latestOffset(initial, second.getDefaultReadLimit()))
        assert end.partitions == {key: 60}  # joined where the group was
        assert store.loads == 2
        end = SourceOffset.from_json(second.latestOffset(end.to_json(), ReadAllAvailable()))
        assert end.partitions == {key: 100}
        assert store.loads == 2  # a partition in the start offset is not asked again
    finally:
        second.stop()


def test_commit_carries_the_ingestion_time_at_the_low_watermark(
    spark: Any,
    control_plane: ControlPlaneProcess,
    stream_factory: Callable[..., str],
    fleet: FleetDescriptor,
    tmp_path: Path,
) -> None:
    """A query behind its stream commits, with the low watermark, the ingestion time of
    the record at it: the lag monitor sees a real time lag for a Spark group."""
    stream = stream_factory("local-a", partitions=1, lanes=("realtime",))
    with control_plane.client() as client:
        topic = client.routing(stream).active("realtime").topic
    bootstrap = fleet.bootstrap("local-a")
    backlog = 2_000
    # Chunks of 100 records (a micro-batch's worth), each flushed and 20 ms apart: the
    # first record of a chunk is ingested later than the last one of the chunk before
    # (stream topics stamp records with the broker's append time).
    producer = Producer(producer_config(bootstrap))
    for chunk in range(backlog // 100):
        for i in range(100):
            producer.produce(topic, b"v%d" % (chunk * 100 + i))
        assert producer.flush(30) == 0
        time.sleep(0.02)

    group = f"g-{uuid.uuid4().hex[:8]}"
    reader = (
        spark.readStream.format("streamplane")
        .option("stream", stream)
        .option("group", group)
        .option("controlPlane", control_plane.url)
        .option("maxRecordsPerTrigger", "100")  # admission control: the query stays behind
    )
    query = (
        reader.load()
        .writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(processingTime="2 seconds")
        .start()
    )
    try:
        wait_for(
            "two micro-batches with input rows",
            lambda: len([p for p in query.recentProgress if p["numInputRows"]]) >= 2,
            120,
            every=0.2,
        )
    finally:
        query.stop()

    consumer = Consumer(consumer_config(bootstrap, group))
    try:
        loaded = CommitStore(consumer, bootstrap, stream, group).load([(topic, 0)])
        (committed,) = consumer.committed([TopicPartition(topic, 0)], timeout=10)
    finally:
        consumer.close()
    progress, offset = loaded[(topic, 0)]
    assert offset is not None and progress is not None
    assert 100 <= offset < backlog and offset % 100 == 0  # whole micro-batches, still behind
    assert committed.offset == offset and decode(committed.metadata).is_streamplane
    assert progress.low_watermark == offset
    # The ingestion time of the record at the low watermark (the next one to read), as
    # Kafka has it: not the commit time, not the previous record's.
    stamps = _timestamps(bootstrap, topic, [offset - 1, offset])
    assert stamps[offset - 1] < stamps[offset] < progress.commit_time_ms
    assert progress.low_watermark_timestamp_ms == stamps[offset]


def _timestamps(bootstrap: str, topic: str, offsets: list[int]) -> dict[int, int]:
    consumer = Consumer(consumer_config(bootstrap, f"peek-{uuid.uuid4().hex[:8]}"))
    found: dict[int, int] = {}
    try:
        consumer.assign([TopicPartition(topic, 0, min(offsets))])
        deadline = time.monotonic() + 30
        while len(found) < len(offsets) and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=100, timeout=1.0):
                if msg.error() is None and msg.offset() in offsets:
                    found[int(msg.offset() or 0)] = msg.timestamp()[1]
    finally:
        consumer.close()
    assert len(found) == len(offsets)
    return found


def test_a_new_query_commits_where_it_starts(
    control_plane: ControlPlaneProcess, stream_factory: Callable[..., str]
) -> None:
    """The first micro-batch commits the offsets the query starts from: the lag monitor
    tracks the group (and its growing time lag) from the start, not from the end of its
    first micro-batch, which can take a minute of Spark warm-up."""
    options = _hundred_records(control_plane, stream_factory)
    group = options["group"]
    reader = StreamplaneStreamReader(parse_read_options(options))
    try:
        initial = reader.initialOffset()
        ((key, begin),) = SourceOffset.from_json(initial).partitions.items()
        assert begin == 0
        reader.latestOffset(initial, reader.getDefaultReadLimit())  # micro-batch 0 planned
        loaded = reader._store("local-a").load([(key.topic, key.partition)])
    finally:
        reader.stop()
    progress, offset = loaded[(key.topic, key.partition)]
    assert offset == 0 and progress is not None and progress.low_watermark == 0
    with control_plane.client() as client:

        def time_lag() -> Any:
            groups = {g["group"]: g for g in client.lag(group=group)["groups"]}
            return groups.get(group, {}).get("max_time_lag_s")

        lag = wait_for(f"the lag monitor to show {group} with a time lag", time_lag, 30, every=0.5)
    assert lag > 0


def test_a_new_query_starts_at_the_groups_progress_whenever_spark_asks(
    control_plane: ControlPlaneProcess, stream_factory: Callable[..., str]
) -> None:
    """startingOffsets=committed: Spark asks a new query's initialOffset twice, and
    plans micro-batch 0 from the second answer, which must be the group's progress too
    (it was the beginning of every partition: a new query read everything again)."""
    options = _hundred_records(control_plane, stream_factory)
    first = StreamplaneStreamReader(parse_read_options(options))
    try:
        start = SourceOffset.from_json(first.initialOffset())
        ((key, _),) = start.partitions.items()
        first.commit(SourceOffset(start.epoch, {key: 60}).to_json())  # the group's progress
    finally:
        first.stop()
    second = StreamplaneStreamReader(parse_read_options(options))
    try:
        answers = [SourceOffset.from_json(second.initialOffset()).partitions for _ in range(2)]
    finally:
        second.stop()
    assert answers == [{key: 60}, {key: 60}]
