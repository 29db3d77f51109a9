"""Options of the ``streamplane`` Spark data source, parsed and checked. Pure.

Reading::

    spark.readStream.format("streamplane")
        .option("stream", "telemetry")          # required
        .option("group", "telemetry-job")       # required: the group whose commit log we write
        .option("controlPlane", "http://127.0.0.1:8470")   # default shown
        .option("token", "...")                 # optional (reads need none)
        .option("lanes", "realtime,bulk")       # default: every lane but the dlq
        .option("maxRecordsPerTrigger", 50000)  # admission control (rows)
        .option("maxBytesPerTrigger", 64 << 20) # admission control (bytes, from sampled sizes)
        .option("estimatedRecordBytes", 512)    # bytes a record until a sample is read
        .option("startingOffsets", "committed") # committed | earliest | latest
        .load()

Writing: ``stream`` (required), ``controlPlane``, ``token``, ``lane`` (default: the
stream's first lane; a ``lane`` column overrides it per row).

Option names are case-insensitive (Spark lower-cases them).
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass

from streamplane.client.control_plane import DEFAULT_URL
from streamplane.core.routing import DLQ_LANE, validate_lane_name, validate_stream_name
from streamplane.exceptions import ConfigError
from streamplane.pipeline.planning import FIRST_GUESS_RECORD_BYTES

STARTING_OFFSETS = ("committed", "earliest", "latest")
DEFAULT_SPLIT_RECORDS = 100_000
# maxBytesPerTrigger's bytes per record until the stream's records have been sampled.
DEFAULT_ESTIMATED_RECORD_BYTES = FIRST_GUESS_RECORD_BYTES


@dataclass(frozen=True)
class ReadOptions:
    stream: str
    group: str
    control_plane: str = DEFAULT_URL
    token: str | None = None
    lanes: tuple[str, ...] | None = None  # None: every lane but the dlq
    max_records_per_trigger: int | None = None
    max_bytes_per_trigger: int | None = None
    estimated_record_bytes: int = DEFAULT_ESTIMATED_RECORD_BYTES
    starting_offsets: str = "committed"
    max_records_per_split: int = DEFAULT_SPLIT_RECORDS
    commit_to_kafka: bool = True


@dataclass(frozen=True)
class WriteOptions:
    stream: str
    control_plane: str = DEFAULT_URL
    token: str | None = None
    lane: str | None = None


def _get(options: Mapping[str, str], *names: str) -> str | None:
    lowered = {str(k).lower(): v for k, v in options.items()}
    for name in names:
        value = lowered.get(name.lower())
        if value is not None and str(value).strip() != "":
            return str(value).strip()
    return None


def _required(options: Mapping[str, str], name: str, what: str) -> str:
    value = _get(options, name)
    if value is None:
        raise ConfigError(f"the streamplane source needs the option {name!r} ({what})")
    return value


def _positive(options: Mapping[str, str], name: str) -> int | None:
    value = _get(options, name)
    if value is None:
        return None
    try:
        number = int(value)
    except ValueError:
        raise ConfigError(f"option {name!r} must be a whole number, got {value!r}") from None
    if number < 1:
        raise ConfigError(f"option {name!r} must be at least 1, got {number}")
    return number


# The names of the control plane's URL: ``controlPlane`` and its aliases.
CONTROL_PLANE_OPTIONS = ("controlPlane", "control_plane", "url")


def _url(options: Mapping[str, str]) -> str:
    """The control plane's URL. Two of its names with different values are refused, as
    Spark's own sources refuse contradicting options: one of them was ignored without a
    word (``url`` read as Kafka's bootstrap servers, say, while ``controlPlane`` won)."""
    given = {name: _get(options, name) for name in CONTROL_PLANE_OPTIONS}
    named = {name: value for name, value in given.items() if value is not None}
    if len(set(named.values())) > 1:
        raise ConfigError(
            f"options {_and(list(named))} name the control plane with different values "
            f"({', '.join(f'{n}={v!r}' for n, v in named.items())}): give one of them (they "
            "are aliases). Kafka's bootstrap servers are no option: the source takes each "
            "cluster's from the control plane"
        )
    name, url = next(iter(named.items()), ("controlPlane", DEFAULT_URL))
    if not url.startswith(("http://", "https://")):
        raise ConfigError(f"option {name!r} must be an http(s) URL, got {url!r}")
    return url


def _and(names: list[str]) -> str:
    """``'a' and 'b'``, ``'a', 'b' and 'c'``."""
    quoted = [repr(n) for n in names]
    return ", ".join(quoted[:-1]) + f" and {quoted[-1]}"


# The reader's options (matched without regard to case, as Spark does).
READ_OPTIONS = (
    "stream",
    "group",
    *CONTROL_PLANE_OPTIONS,
    "token",
    "lanes",
    "startingOffsets",
    "commitToKafka",
    "maxRecordsPerTrigger",
    "maxBytesPerTrigger",
    "estimatedRecordBytes",
    "maxRecordsPerSplit",
)


def _check_known(options: Mapping[str, str], known: tuple[str, ...]) -> None:
    """A misspelt option (``maxRecordPerTrigger``) was ignored: the query ran without it."""
    by_lower = {name.lower(): name for name in known}
    for given in options:
        if str(given).lower() not in by_lower:
            close = difflib.get_close_matches(str(given).lower(), list(by_lower), n=1)
            hint = f" (did you mean {by_lower[close[0]]!r}?)" if close else ""
            raise ConfigError(
                f"the streamplane source has no option {given!r}{hint}; its options "
                f"(names are case-insensitive: Spark passes them lower-cased): {', '.join(known)}"
            )


def parse_read_options(options: Mapping[str, str]) -> ReadOptions:
    """Check the reader's options; raises ConfigError naming the bad option."""
    _check_known(options, READ_OPTIONS)
    stream = validate_stream_name(_required(options, "stream", "the stream to read"))
    group = _required(options, "group", "the consumer group whose progress the source commits")
    lanes_text = _get(options, "lanes")
    if lanes_text is None and any(str(k).lower() == "lanes" for k in options):
        raise ConfigError("option 'lanes' names no lane (leave it out to read every lane)")
    lanes: tuple[str, ...] | None = None
    if lanes_text is not None:
        lanes = tuple(x.strip() for x in lanes_text.split(",") if x.strip())
        if not lanes:
            raise ConfigError("option 'lanes' names no lane")
        for lane in lanes:
            validate_lane_name(lane)
    starting = (_get(options, "startingOffsets") or "committed").lower()
    if starting not in STARTING_OFFSETS:
        raise ConfigError(
            f"option 'startingOffsets' must be one of {', '.join(STARTING_OFFSETS)}, "
            f"got {starting!r}"
        )
    commit_text = (_get(options, "commitToKafka") or "true").lower()
    if commit_text not in ("true", "false"):
        raise ConfigError(f"option 'commitToKafka' must be true or false, got {commit_text!r}")
    return ReadOptions(
        stream=stream,
        group=group,
        control_plane=_url(options),
        token=_get(options, "token"),
        lanes=lanes,
        max_records_per_trigger=_positive(options, "maxRecordsPerTrigger"),
        max_bytes_per_trigger=_positive(options, "maxBytesPerTrigger"),
        estimated_record_bytes=_positive(options, "estimatedRecordBytes")
        or DEFAULT_ESTIMATED_RECORD_BYTES,
        starting_offsets=starting,
        max_records_per_split=_positive(options, "maxRecordsPerSplit") or DEFAULT_SPLIT_RECORDS,
        commit_to_kafka=commit_text == "true",
    )


def parse_write_options(options: Mapping[str, str]) -> WriteOptions:
    stream = validate_stream_name(_required(options, "stream", "the stream to write"))
    lane = _get(options, "lane")
    if lane is not None and lane != DLQ_LANE:
        validate_lane_name(lane)
    return WriteOptions(
        stream=stream, control_plane=_url(options), token=_get(options, "token"), lane=lane
    )
