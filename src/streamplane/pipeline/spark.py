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

import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from streamplane.local.distribution import MavenClasspath, spark_connectors

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
