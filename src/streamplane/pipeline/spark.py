"""A SparkSession for the pipeline: Delta Lake, the ``streamplane`` format, local jars.

The JVM connectors (Delta Lake, Spark's own Kafka source for the benchmark) come from
``infra/spark/pom.xml``, resolved by Maven (``streamplane.local.distribution``), and
reach Spark through ``spark.jars``: no Ivy resolution, so nothing at start-up tries
the network. Jars that PySpark already ships (Scala, Jackson, Hadoop client, Parquet,
logging, compression codecs) are left out, so Spark's own versions win.

On a cluster (``master`` other than ``local[...]``) the same jars are shipped by Spark;
the executors need the ``streamplane`` Python package (``pip install`` it on the nodes,
or pass it with ``--py-files``). See docs/pipeline.md.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from streamplane.local.distribution import MavenClasspath, spark_connectors

log = logging.getLogger(__name__)

DELTA_CONF = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
}

# Settings for a small machine: few shuffle partitions, no UI, quiet Delta.
SMALL_CONF = {
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.databricks.delta.snapshotPartitions": "2",
    "spark.sql.streaming.pollingDelay": "100ms",
    "spark.sql.adaptive.enabled": "false",
    "spark.driver.memory": "2g",
}

_VERSIONED_JAR = re.compile(r"^(?P<artifact>.+)-\d+(\.\d+)+[\w.+-]*\.jar$")


def artifact_name(jar: str | Path) -> str:
    """``jackson-core-2.13.5.jar`` -> ``jackson-core``."""
    name = Path(jar).name
    match = _VERSIONED_JAR.match(name)
    return match.group("artifact") if match else name


def connector_jars(classpath: MavenClasspath | None = None) -> list[Path]:
    """The resolved connector jars, less those PySpark already has (any version)."""
    import pyspark

    jars = (classpath or spark_connectors()).jars()
    shipped = {artifact_name(j) for j in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}
    return [j for j in jars if artifact_name(j) not in shipped]


def build_session(
    app_name: str = "streamplane",
    master: str | None = "local[2]",
    conf: Mapping[str, str] | None = None,
    *,
    small: bool = True,
    warehouse: Path | None = None,
) -> Any:
    """A SparkSession with Delta Lake and the ``streamplane`` format registered.

    ``master=None`` leaves the master to ``spark-submit``.
    """
    from pyspark.sql import SparkSession

    from streamplane.pipeline.source import register

    # Python workers run this interpreter (the one with streamplane installed).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    if master is not None:
        builder = builder.master(master)
    settings: dict[str, str] = {
        "spark.jars": ",".join(str(j) for j in connector_jars()),
        "spark.pyspark.python": sys.executable,
        "spark.pyspark.driver.python": sys.executable,
        **DELTA_CONF,
        **(SMALL_CONF if small else {}),
        # Plans of the telemetry job's wide rows print more than Spark's 25 fields: it
        # warned "Truncated the string representation of a plan" at every start.
        "spark.sql.debug.maxToStringFields": "200",
    }
    if warehouse is not None:
        settings["spark.sql.warehouse.dir"] = str(warehouse)
    settings.update(conf or {})
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    register(spark)
    return spark


# Spark runs the driver side of a Python streaming source (its ``latestOffset`` and
# ``commit``) in a Python process it starts as the query opens its sources, and gives
# that process a fixed 10 s to connect back (``PythonWorkerFactory.createSimpleWorker``,
# not a setting in Spark 4.2). On a machine busy enough that starting Python and
# importing PySpark takes longer, the query dies as it starts, with one of these.
_SOURCE_PROCESS_LATE = (
    "Python worker failed to connect back",
    "waiting for the Python worker to connect back",
)
QUERY_START_ATTEMPTS = 3
# Spark's status message while a query opens its sources.
_OPENING_SOURCES = "Initializing sources"
_SOURCES_OPEN_TIMEOUT_S = 120.0


def start_query(
    writer: Any,
    *,
    attempts: int = QUERY_START_ATTEMPTS,
    sources_timeout_s: float = _SOURCES_OPEN_TIMEOUT_S,
    say: Callable[[str], None] = log.warning,
) -> Any:
    """``writer.start()`` (a ``DataStreamWriter``), returned once the query has opened
    its sources. A query that died opening them because Spark's Python source process
    did not connect back in time (a busy machine) is started again from its checkpoint,
    which loses nothing, up to ``attempts`` starts in all; ``say`` tells each time. Any
    other failure is the caller's to see (``awaitTermination`` raises it)."""
    query = _opened(writer.start(), sources_timeout_s)
    for attempt in range(2, attempts + 1):
        error = None if query.isActive else query.exception()
        if error is None or not source_process_late(error):
            break
        say(
            f"the streaming query died as it started: Spark's Python source process did "
            f"not connect back within Spark's fixed 10 s (a busy machine); starting it "
            f"again from its checkpoint (start {attempt} of {attempts})"
        )
        query = _opened(writer.start(), sources_timeout_s)
    return query


def _opened(query: Any, timeout_s: float) -> Any:
    """``query`` once it has opened its sources (or ended, or ``timeout_s`` passed)."""
    deadline = time.monotonic() + timeout_s
    while (
        query.isActive
        and query.status.get("message") == _OPENING_SOURCES
        and time.monotonic() < deadline
    ):
        time.sleep(0.1)
    return query


def source_process_late(error: BaseException) -> bool:
    """Whether a query's ``error`` is Spark's Python source process not connecting back
    in time (``start_query``)."""
    text = f"{error} {getattr(error, 'desc', '')} {getattr(error, 'stackTrace', '')}"
    return any(marker in text for marker in _SOURCE_PROCESS_LATE)
