"""A streaming query whose Python source process connects back late is started again.

Spark starts the driver side of a Python streaming source in a Python process that must
connect back within a fixed 10 s. `make run` on a machine at load ~26 died there once
("Python worker failed to connect back"). Here the process's first start is held 13 s by
a wrapper around the interpreter (a source registered with it as its Python), and
``start_query`` must come back with a running query, having said why it started again.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from streamplane.pipeline.spark import start_query

WRAPPER = """#!/bin/sh
case "$*" in *python_streaming_source_runner*)
  if [ ! -e {mark} ]; then touch {mark}; sleep 13; fi;;
esac
exec {python} "$@"
"""


def _register_slow_source(spark: Any, python: Path) -> str:
    """Register a tiny streaming source whose Python processes run ``python``."""
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

    class Reader(DataSourceStreamReader):
        def initialOffset(self) -> dict[str, int]:
            return {"n": 0}

        def latestOffset(self, start: dict[str, int], limit: Any) -> dict[str, int]:
            return {"n": 1}

        def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[Any]:
            return [InputPartition(0)] if start["n"] < end["n"] else []

        def read(self, partition: Any) -> Iterator[tuple[int]]:
            yield (1,)

    class LateSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return "late_source_process"

        def schema(self) -> str:
            return "n int"

        def streamReader(self, schema: Any) -> Reader:
            return Reader()

    sc = spark.sparkContext
    usual = sc.pythonExec
    sc.pythonExec = str(python)  # the registered function keeps the interpreter it was given
    try:
        spark.dataSource.register(LateSource)
    finally:
        sc.pythonExec = usual
    return LateSource.name()


def test_a_query_whose_source_process_connects_back_late_is_started_again(
    spark: Any, tmp_path: Path
) -> None:
    mark = tmp_path / "held-once"
    wrapper = tmp_path / "python"
    wrapper.write_text(WRAPPER.format(mark=mark, python=sys.executable))
    wrapper.chmod(0o755)
    fmt = _register_slow_source(spark, wrapper)
    writer = (
        spark.readStream.format(fmt)
        .load()
        .writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime="1 second")
    )
    said: list[str] = []
    query = start_query(writer, say=said.append)
    try:
        assert mark.exists(), "the wrapper did not hold the source process"
        assert query.isActive, query.exception()
        assert len(said) == 1 and "did not connect back" in said[0], said
        query.processAllAvailable()
        assert query.lastProgress is not None
    finally:
        query.stop()
