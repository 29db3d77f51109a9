"""maxBytesPerTrigger through Spark: micro-batches sized by the bytes of the records
read, not by 512 bytes a record; and two names of the control plane refused at load."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from streamplane.client.producer import StreamProducer
from streamplane.local.control_plane_process import ControlPlaneProcess

RECORD_BYTES = 2_000
MAX_BYTES = 100_000  # 50 records of 2,000 bytes (195 at 512 bytes a record)


def test_micro_batches_hold_about_max_bytes_of_records(
    spark: Any,
    control_plane: ControlPlaneProcess,
    stream_factory: Callable[..., str],
    tmp_path: Path,
) -> None:
    stream = stream_factory("local-a", partitions=1, lanes=("realtime",))
    with control_plane.client() as client, StreamProducer(stream, client) as producer:
        for i in range(300):
            producer.send(b"%06d" % i + b"x" * (RECORD_BYTES - 6))
    query = (
        spark.readStream.format("streamplane")
        .option("stream", stream)
        .option("group", f"g-{uuid.uuid4().hex[:8]}")
        .option("controlPlane", control_plane.url)
        .option("commitToKafka", "false")
        .option("maxBytesPerTrigger", str(MAX_BYTES))
        .load()
        .writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(300)
    rows = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    print(f"\nrows per micro-batch: {rows}")
    assert sum(rows) == 300
    assert rows[:-1] == [MAX_BYTES // RECORD_BYTES] * (len(rows) - 1), rows
    assert rows[-1] <= MAX_BYTES // RECORD_BYTES


def test_two_names_of_the_control_plane_fail_at_load(
    spark: Any, control_plane: ControlPlaneProcess, stream_factory: Callable[..., str]
) -> None:
    stream = stream_factory("local-a", partitions=1, lanes=("realtime",))
    reader = (
        spark.readStream.format("streamplane")
        .option("stream", stream)
        .option("group", "g")
        .option("controlPlane", control_plane.url)
        .option("url", "localhost:9092")  # taken for Kafka's bootstrap servers
    )
    with pytest.raises(Exception, match="PYTHON_DATA_SOURCE_ERROR") as info:
        reader.load()
    *_, problem, _ = str(info.value).splitlines()
    assert problem.startswith(
        "streamplane.exceptions.ConfigError: options 'controlPlane' and 'url' name the "
        f"control plane with different values (controlPlane='{control_plane.url}', "
        "url='localhost:9092'): give one of them"
    )
