"""Options of the streamplane Spark source: bad input names the option."""

from __future__ import annotations

import pytest

from streamplane.exceptions import ConfigError
from streamplane.pipeline.options import parse_read_options, parse_write_options
from streamplane.pipeline.spark import artifact_name


def test_defaults_and_case_insensitive_names() -> None:
    opts = parse_read_options({"stream": "logs", "GROUP": "g", "maxrecordspertrigger": "100"})
    assert opts.stream == "logs" and opts.group == "g"
    assert opts.max_records_per_trigger == 100
    assert opts.lanes is None and opts.starting_offsets == "committed"


def test_byte_limit_and_first_guess() -> None:
    """The byte limit stays in bytes: planning turns it into rows at the sampled sizes
    (tests/unit/pipeline/test_record_sizes.py); 512 bytes is only the first guess."""
    opts = parse_read_options(
        {"stream": "s", "group": "g", "maxBytesPerTrigger": "10000", "estimatedRecordBytes": "100"}
    )
    assert (opts.max_bytes_per_trigger, opts.estimated_record_bytes) == (10_000, 100)
    default = parse_read_options({"stream": "s", "group": "g", "maxBytesPerTrigger": "10000"})
    assert default.estimated_record_bytes == 512


@pytest.mark.parametrize(
    ("options", "needle"),
    [
        ({"group": "g"}, "'stream'"),
        ({"stream": "s"}, "'group'"),
        ({"stream": "Bad Name", "group": "g"}, "invalid stream name"),
        ({"stream": "s", "group": "g", "maxRecordsPerTrigger": "0"}, "maxRecordsPerTrigger"),
        ({"stream": "s", "group": "g", "maxBytesPerTrigger": "x"}, "maxBytesPerTrigger"),
        ({"stream": "s", "group": "g", "lanes": " , "}, "'lanes'"),
        ({"stream": "s", "group": "g", "startingOffsets": "middle"}, "startingOffsets"),
        ({"stream": "s", "group": "g", "controlPlane": "ftp://x"}, "controlPlane"),
        # A misspelt option was ignored, and an empty lanes option read every lane.
        (
            {"stream": "s", "group": "g", "maxRecordPerTrigger": "9"},
            "no option 'maxRecordPerTrigger' .did you mean 'maxRecordsPerTrigger'",
        ),
        ({"stream": "s", "group": "g", "bogusOption": "1"}, "no option 'bogusOption'"),
        ({"stream": "s", "group": "g", "lanes": ""}, "'lanes' names no lane"),
    ],
)
def test_bad_read_options(options: dict[str, str], needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        parse_read_options(options)


def test_write_options() -> None:
    assert parse_write_options({"stream": "s", "lane": "dlq"}).lane == "dlq"
    with pytest.raises(ConfigError, match="'stream'"):
        parse_write_options({})


@pytest.mark.parametrize(
    ("jar", "name"),
    [
        ("/x/jackson-core-2.13.5.jar", "jackson-core"),
        ("delta-spark_4.2_2.13-4.4.0.jar", "delta-spark_4.2_2.13"),
        ("zstd-jni-1.5.7-3.jar", "zstd-jni"),
        ("spark-sql-kafka-0-10_2.13-4.2.0.jar", "spark-sql-kafka-0-10_2.13"),
    ],
)
def test_artifact_name(jar: str, name: str) -> None:
    assert artifact_name(jar) == name


def test_the_writer_takes_string_or_binary_values_and_keys() -> None:
    """Checked on the driver: an int value failed in every task with a TypeError."""
    from pyspark.sql.types import BinaryType, IntegerType, StringType, StructField, StructType

    from streamplane.pipeline.source import _columns

    def schema(**types: object) -> StructType:
        return StructType([StructField(n, t) for n, t in types.items()])  # type: ignore[arg-type]

    assert _columns(schema(value=BinaryType(), key=StringType(), lane=StringType())) == (
        "value",
        "key",
        "lane",
    )
    with pytest.raises(ConfigError, match="column 'value' is int: a stream takes string or binary"):
        _columns(schema(value=IntegerType()))
    with pytest.raises(ConfigError, match="column 'key' is int"):
        _columns(schema(value=StringType(), key=IntegerType()))
    with pytest.raises(ConfigError, match="needs a 'value' column"):
        _columns(schema(payload=StringType()))


def test_batch_reads_say_to_read_a_stream() -> None:
    """``spark.read.format("streamplane").load().count()`` failed with Spark's bare
    "[NOT_IMPLEMENTED] reader is not implemented"."""
    from streamplane.pipeline.source import StreamplaneDataSource

    source = StreamplaneDataSource({"stream": "s", "group": "g"})
    with pytest.raises(ConfigError, match=r"streams only: use spark.readStream"):
        source.reader(None)


def test_a_misspelt_option_as_spark_passes_it_says_names_are_case_insensitive() -> None:
    """Spark lower-cases option names before the source sees them: the message quotes
    the lower-cased name, so it says why."""
    with pytest.raises(ConfigError) as info:
        parse_read_options({"stream": "s", "group": "g", "maxrecordpertrigger": "9"})
    message = str(info.value)
    assert "no option 'maxrecordpertrigger' (did you mean 'maxRecordsPerTrigger'?)" in message
    assert "names are case-insensitive" in message
