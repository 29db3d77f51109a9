"""Telemetry events: the schemas, validation and the reference rollups. Pure (pyarrow only).

Three kinds of JSON events share a header (schemas in docs/pipeline.md):

- ``event_id`` (string, unique), ``kind`` (``log`` | ``metric`` | ``span``), ``ts``
  (event time, epoch milliseconds), ``service`` and ``host`` (strings);
- a log adds ``level`` (``debug`` | ``info`` | ``warn`` | ``error``) and ``message``;
- a metric adds ``name``, ``value`` (finite number) and optional ``unit``;
- a span adds ``trace_id``, ``span_id``, optional ``parent_id``, ``name``,
  ``duration_ms`` (number >= 0) and ``status`` (``ok`` | ``error``).

``validate`` turns one record value into an ``Event`` or raises ``Invalid`` with the
reason, and nothing else: whatever the bytes (not UTF-8, not JSON, nested past the
parser's depth, numbers past a float's range, strings that cannot be encoded), the
record is a poison pill, never an error that stops the job. ``parse_batch`` does it
for an Arrow batch of the source's rows (the telemetry job runs it through
``mapInArrow``, so Spark and the unit tests share one validator). ``reference_rollups``
computes the rollups the job must produce, from valid events: the tests compare
them with the tables.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

KINDS = ("log", "metric", "span")
LEVELS = ("debug", "info", "warn", "error")
STATUSES = ("ok", "error")
PERCENTILES = (0.5, 0.95, 0.99)
MAX_ID_CHARS = 128

# Event time must be a plausible epoch-millisecond value (2000-01-01 .. 2100-01-01).
_MIN_TS = 946_684_800_000
_MAX_TS = 4_102_444_800_000


@dataclass(frozen=True)
class Event:
    event_id: str
    kind: str
    ts_ms: int
    service: str
    host: str
    level: str | None = None
    message: str | None = None
    metric_name: str | None = None
    metric_value: float | None = None
    metric_unit: str | None = None
    trace_id: str | None = None
    span_id: str | None = None
    parent_id: str | None = None
    span_name: str | None = None
    duration_ms: float | None = None
    status: str | None = None

    @property
    def minute_ms(self) -> int:
        return self.ts_ms - self.ts_ms % 60_000


class Invalid(ValueError):
    """A record that is not a valid telemetry event; the message is the dlq reason."""


def _encodable(name: str, value: str) -> str:
    """``value``, which must be storable as UTF-8: JSON's ``\\ud800`` escapes decode to
    lone surrogates, which no UTF-8 encoder (Arrow's included) takes."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise Invalid(
            f"field {name!r} is not valid Unicode: a lone surrogate at character {exc.start}"
        ) from None
    return value


def _text(doc: Mapping[str, Any], name: str, *, required: bool = True) -> str | None:
    value = doc.get(name)
    if value is None:
        if required:
            raise Invalid(f"missing field {name!r}")
        return None
    if not isinstance(value, str) or not value.strip():
        raise Invalid(f"field {name!r} must be a non-empty string")
    if len(value) > MAX_ID_CHARS:
        raise Invalid(f"field {name!r} is longer than {MAX_ID_CHARS} characters")
    return _encodable(name, value)


def _number(doc: Mapping[str, Any], name: str) -> float:
    value = doc.get(name)
    if value is None:
        raise Invalid(f"missing field {name!r}")
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise Invalid(f"field {name!r} must be a number")
    try:
        number = float(value)
    except OverflowError:  # an integer of hundreds of digits
        raise Invalid(f"field {name!r} is too large for a number") from None
    if not math.isfinite(number):
        raise Invalid(f"field {name!r} must be finite")
    return number


def _load_json(text: str) -> Any:
    try:
        return json.loads(text)
    except RecursionError:  # ``[[[[…`` deeper than the parser's recursion limit
        raise Invalid("malformed JSON: nested too deeply") from None
    except ValueError as exc:  # includes integers past Python's 4,300-digit limit
        raise Invalid(f"malformed JSON: {exc}") from None


def validate(value: bytes | str | None) -> Event:
    """The event in ``value``, or ``Invalid`` with the reason (and no other exception)."""
    if value is None:
        raise Invalid("empty record")
    if isinstance(value, bytes):
        # Events are UTF-8 (json.loads of bytes would guess UTF-16 or -32 from the
        # first bytes, and tell a binary record as a UTF-16 decode error).
        try:
            value = value.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise Invalid(f"not UTF-8 text: {exc.reason} at byte {exc.start}") from None
    doc = _load_json(value)
    if not isinstance(doc, dict):
        raise Invalid("not a JSON object")
    event_id = _text(doc, "event_id")
    kind = _text(doc, "kind")
    if kind not in KINDS:
        raise Invalid(f"unknown kind {kind!r}")
    ts = doc.get("ts")
    if ts is None:
        raise Invalid("missing field 'ts'")
    if isinstance(ts, bool) or not isinstance(ts, int):
        raise Invalid("field 'ts' must be epoch milliseconds (an integer)")
    if not _MIN_TS <= ts < _MAX_TS:
        raise Invalid(f"field 'ts' out of range: {ts}")
    service = _text(doc, "service")
    host = _text(doc, "host")
    assert event_id is not None and service is not None and host is not None
    base: dict[str, Any] = {
        "event_id": event_id,
        "kind": kind,
        "ts_ms": ts,
        "service": service,
        "host": host,
    }
    if kind == "log":
        level = _text(doc, "level")
        if level not in LEVELS:
            raise Invalid(f"unknown log level {level!r}")
        message = doc.get("message", "")
        if not isinstance(message, str):
            raise Invalid("field 'message' must be a string")
        return Event(**base, level=level, message=_encodable("message", message))
    if kind == "metric":
        return Event(
            **base,
            metric_name=_text(doc, "name"),
            metric_value=_number(doc, "value"),
            metric_unit=_text(doc, "unit", required=False),
        )
    duration = _number(doc, "duration_ms")
    if duration < 0:
        raise Invalid(f"field 'duration_ms' is negative: {duration}")
    status = _text(doc, "status")
    if status not in STATUSES:
        raise Invalid(f"unknown span status {status!r}")
    return Event(
        **base,
        trace_id=_text(doc, "trace_id"),
        span_id=_text(doc, "span_id"),
        parent_id=_text(doc, "parent_id", required=False),
        span_name=_text(doc, "name"),
        duration_ms=duration,
        status=status,
    )


# --------------------------------------------------------------------------- Arrow
SOURCE_COLUMNS = ("cluster", "topic", "partition", "offset", "lane", "key", "value", "timestamp")

PARSED_SCHEMA_DDL = (
    "cluster string, topic string, partition int, offset long, lane string, key binary, "
    "value binary, ingest_ts timestamp, event_id string, kind string, ts timestamp, "
    "service string, host string, level string, message string, metric_name string, "
    "metric_value double, metric_unit string, trace_id string, span_id string, "
    "parent_id string, span_name string, duration_ms double, status string, reason string"
)

_EVENT_FIELDS = (
    "event_id", "kind", "ts", "service", "host", "level", "message", "metric_name",
    "metric_value", "metric_unit", "trace_id", "span_id", "parent_id", "span_name",
    "duration_ms", "status",
)  # fmt: skip


def parsed_arrow_schema() -> Any:
    import pyarrow as pa

    ts = pa.timestamp("us", tz="UTC")
    types = {
        "partition": pa.int32(),
        "offset": pa.int64(),
        "key": pa.binary(),
        "value": pa.binary(),
        "ingest_ts": ts,
        "ts": ts,
        "metric_value": pa.float64(),
        "duration_ms": pa.float64(),
    }
    names = [part.split()[0] for part in PARSED_SCHEMA_DDL.split(", ")]
    return pa.schema([(n, types.get(n, pa.string())) for n in names])


MAX_REASON_CHARS = 500


def event_or_reason(value: bytes | str | None) -> Event | str:
    """The event in ``value``, or why it is a poison pill (storable text, at most
    ``MAX_REASON_CHARS``). Total: one bad record must never stop the job, so an error
    ``validate`` did not foresee is a reason too."""
    try:
        return validate(value)
    except Invalid as exc:
        reason = str(exc)
    except Exception as exc:  # anything else is a poison pill as well
        reason = f"cannot be validated: {type(exc).__name__}: {exc}"
    return reason.encode("utf-8", "backslashreplace").decode("utf-8")[:MAX_REASON_CHARS]


def parse_batch(batch: Any) -> Any:
    """Source rows (an Arrow batch with ``SOURCE_COLUMNS``) -> parsed rows with a reason."""
    import pyarrow as pa

    schema = parsed_arrow_schema()
    values = batch.column("value").to_pylist()
    columns: dict[str, list[Any]] = {name: [] for name in (*_EVENT_FIELDS, "reason")}
    for value in values:
        ev = event_or_reason(value)
        if isinstance(ev, str):
            for name in _EVENT_FIELDS:
                columns[name].append(None)
            columns["reason"].append(ev)
            continue
        row = ev.__dict__
        for name in _EVENT_FIELDS:
            columns[name].append(ev.ts_ms * 1000 if name == "ts" else row[name])
        columns["reason"].append(None)
    arrays = [
        batch.column("cluster"),
        batch.column("topic"),
        batch.column("partition"),
        batch.column("offset"),
        batch.column("lane"),
        batch.column("key"),
        batch.column("value"),
        batch.column("timestamp").cast(schema.field("ingest_ts").type),
        *(pa.array(columns[n], schema.field(n).type) for n in (*_EVENT_FIELDS, "reason")),
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def parse_batches(batches: Iterable[Any]) -> Iterator[Any]:
    """For ``DataFrame.mapInArrow``."""
    for batch in batches:
        yield parse_batch(batch)


# --------------------------------------------------------------------------- reference
def percentile(values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (Spark's ``percentile``, numpy's default)."""
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    lower = math.floor(pos)
    upper = math.ceil(pos)
    if lower == upper:
        return ordered[lower]
    return ordered[lower] + (ordered[upper] - ordered[lower]) * (pos - lower)


@dataclass
class Rollups:
    """The three rollup tables, keyed as in the event store (minute = epoch ms)."""

    log_counts: dict[tuple[int, str, str], int] = field(default_factory=dict)
    metrics: dict[tuple[int, str, str], tuple[int, float, float, float]] = field(
        default_factory=dict
    )  # count, sum, min, max
    spans: dict[tuple[int, str], tuple[int, int, float, float, float]] = field(
        default_factory=dict
    )  # count, errors, p50, p95, p99


def reference_rollups(events: Iterable[Event]) -> Rollups:
    """What the job's rollup tables must hold for these (deduplicated) events."""
    logs: dict[tuple[int, str, str], int] = defaultdict(int)
    metric_values: dict[tuple[int, str, str], list[float]] = defaultdict(list)
    spans: dict[tuple[int, str], list[Event]] = defaultdict(list)
    seen: set[str] = set()
    for ev in events:
        if ev.event_id in seen:
            continue
        seen.add(ev.event_id)
        if ev.kind == "log":
            logs[(ev.minute_ms, ev.service, ev.level or "")] += 1
        elif ev.kind == "metric":
            assert ev.metric_value is not None
            metric_values[(ev.minute_ms, ev.service, ev.metric_name or "")].append(ev.metric_value)
        else:
            spans[(ev.minute_ms, ev.service)].append(ev)
    out = Rollups(log_counts=dict(logs))
    for key, vals in metric_values.items():
        out.metrics[key] = (len(vals), math.fsum(vals), min(vals), max(vals))
    for span_key, evs in spans.items():
        durations = [e.duration_ms for e in evs if e.duration_ms is not None]
        errors = sum(1 for e in evs if e.status == "error")
        p50, p95, p99 = (percentile(durations, q) for q in PERCENTILES)
        out.spans[span_key] = (len(evs), errors, p50, p95, p99)
    return out
