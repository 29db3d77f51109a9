"""Telemetry event validation, Arrow parsing, the generator and the reference rollups."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamplane.pipeline.events import (
    Invalid,
    parse_batch,
    percentile,
    reference_rollups,
    validate,
)
from streamplane.pipeline.generator import POISON_KINDS, generate

BASE: dict[str, Any] = {
    "event_id": "e1",
    "ts": 1_795_000_000_000,
    "service": "checkout",
    "host": "h-1",
}


def doc(**fields: Any) -> bytes:
    return json.dumps({**BASE, **fields}).encode()


def test_valid_kinds() -> None:
    log = validate(doc(kind="log", level="warn", message="slow"))
    assert (log.kind, log.level, log.minute_ms) == ("log", "warn", 1_794_999_960_000)
    metric = validate(doc(kind="metric", name="cpu.util", value=12))
    assert metric.metric_value == 12.0 and metric.metric_unit is None
    span = validate(
        doc(kind="span", trace_id="t", span_id="s", name="op", duration_ms=3.5, status="ok")
    )
    assert span.duration_ms == 3.5 and span.parent_id is None


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (None, "empty record"),
        (b"{not json", "malformed JSON"),
        (b"\xff\xfe", "not UTF-8 text: invalid start byte at byte 0"),
        (b"\x00{\x00}", "malformed JSON"),  # was read as UTF-16: {}
        (b"[1, 2]", "not a JSON object"),
        (doc(kind="trace"), "unknown kind"),
        (json.dumps({"kind": "log"}).encode(), "missing field 'event_id'"),
        (doc(kind="log", level="info", ts="yesterday"), "epoch milliseconds"),
        (doc(kind="log", level="info", ts=True), "epoch milliseconds"),
        (doc(kind="log", level="info", ts=5), "out of range"),
        (doc(kind="log", level="loud"), "unknown log level"),
        (doc(kind="log", level="info", service=""), "non-empty string"),
        (doc(kind="metric", name="x", value="1"), "must be a number"),
        (doc(kind="metric", name="x"), "missing field 'value'"),
        (
            doc(kind="span", trace_id="t", span_id="s", name="n", duration_ms=-1, status="ok"),
            "negative",
        ),
        (
            doc(kind="span", trace_id="t", span_id="s", name="n", duration_ms=1, status="meh"),
            "unknown span status",
        ),
    ],
)
def test_invalid_events_say_why(value: bytes | None, reason: str) -> None:
    with pytest.raises(Invalid, match=reason):
        validate(value)


def test_parse_batch_keeps_source_columns_and_reasons() -> None:
    values = [doc(kind="log", level="info"), b"garbage"]
    batch = pa.RecordBatch.from_pydict(
        {
            "cluster": ["a", "a"],
            "topic": ["t", "t"],
            "partition": pa.array([0, 0], pa.int32()),
            "offset": pa.array([5, 6], pa.int64()),
            "lane": ["bulk", "bulk"],
            "key": [b"e1", b"e2"],
            "value": values,
            "timestamp": pa.array([1000, 2000], pa.timestamp("us", tz="UTC")),
        }
    )
    out = parse_batch(batch).to_pydict()
    assert out["event_id"] == ["e1", None]
    assert out["reason"][0] is None and out["reason"][1].startswith("malformed JSON")
    assert out["offset"] == [5, 6]
    assert out["ts"][0].timestamp() == BASE["ts"] / 1000


def test_generator_is_deterministic_and_realistic() -> None:
    a = list(generate(5000, seed=7, poison_ratio=0.01, rate=1000, start_ms=1_795_000_000_000))
    b = list(generate(5000, seed=7, poison_ratio=0.01, rate=1000, start_ms=1_795_000_000_000))
    assert a == b
    assert len({r.key for r in a}) == 5000
    poison = [r for r in a if r.event is None]
    assert 20 <= len(poison) <= 90
    assert {r.poison for r in poison} <= set(POISON_KINDS)
    for r in poison:  # every poison pill is rejected by the validator
        with pytest.raises(Invalid):
            validate(r.value)
    kinds = Counter(r.event.kind for r in a if r.event is not None)
    assert kinds["log"] > kinds["metric"] > kinds["span"] > 0
    lanes = {r.event.kind: r.lane for r in a if r.event is not None and r.event.kind == "span"}
    assert lanes == {"span": "realtime"}


def test_reference_rollups() -> None:
    events = [
        validate(doc(event_id=f"m{i}", kind="metric", name="cpu", value=float(i)))
        for i in range(1, 5)
    ]
    events += [
        validate(
            doc(
                event_id=f"s{i}",
                kind="span",
                trace_id="t",
                span_id="s",
                name="n",
                duration_ms=float(d),
                status="error" if i == 0 else "ok",
            )
        )
        for i, d in enumerate([10, 20, 30, 40, 50])
    ]
    events.append(events[0])  # a duplicate counts once
    ref = reference_rollups(events)
    minute = 1_794_999_960_000
    assert ref.metrics == {(minute, "checkout", "cpu"): (4, 10.0, 1.0, 4.0)}
    count, errors, p50, p95, p99 = ref.spans[(minute, "checkout")]
    assert (count, errors, p50) == (5, 1, 30.0)
    assert p95 == pytest.approx(48.0) and p99 == pytest.approx(49.6)
    assert percentile([1.0], 0.99) == 1.0


# --------------------------------------------------------------------------- totality
def _source_batch(values: list[bytes | None]) -> pa.RecordBatch:
    n = len(values)
    return pa.RecordBatch.from_pydict(
        {
            "cluster": ["a"] * n,
            "topic": ["t"] * n,
            "partition": pa.array([0] * n, pa.int32()),
            "offset": pa.array(range(n), pa.int64()),
            "lane": ["bulk"] * n,
            "key": [b"k"] * n,
            "value": pa.array(values, pa.binary()),
            "timestamp": pa.array([1000] * n, pa.timestamp("us", tz="UTC")),
        }
    )


SPAN = {"kind": "span", "trace_id": "t", "span_id": "s", "name": "n", "status": "ok"}
HUGE = "9" * 401  # a JSON integer no float holds


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        # These raised OverflowError, UnicodeEncodeError (in parse_batch) and
        # RecursionError out of the batch: the job crashed on every restart.
        (
            doc(kind="metric", name="x").replace(b"}", f', "value": {HUGE}}}'.encode()),
            "field 'value' is too large for a number",
        ),
        (
            json.dumps({**BASE, **SPAN}).replace("}", f', "duration_ms": {HUGE}}}').encode(),
            "field 'duration_ms' is too large for a number",
        ),
        (
            doc(kind="log", level="info").replace(b"}", b', "message": "bad \\ud800 text"}'),
            "field 'message' is not valid Unicode: a lone surrogate at character 4",
        ),
        (doc(kind="log", level="info", host="h\ud800"), "field 'host' is not valid Unicode"),
        (b"[" * 100_000, "malformed JSON: nested too deeply"),
        (b'{"a": ' * 100_000, "malformed JSON: nested too deeply"),
    ],
)
def test_records_that_crashed_the_job_are_poison_pills(value: bytes, reason: str) -> None:
    with pytest.raises(Invalid, match=reason):
        validate(value)
    out = parse_batch(_source_batch([value, doc(kind="log", level="info")])).to_pydict()
    assert out["reason"][0].startswith(reason) and out["event_id"][0] is None
    assert out["reason"][1] is None and out["event_id"][1] == "e1"


def test_an_unforeseen_validation_error_is_a_reason_too(monkeypatch: pytest.MonkeyPatch) -> None:
    from streamplane.pipeline import events

    def broken(value: object) -> None:
        raise KeyError("\ud800")

    monkeypatch.setattr(events, "validate", broken)
    (reason,) = parse_batch(_source_batch([b"{}"])).to_pydict()["reason"]
    assert reason == "cannot be validated: KeyError: '\\ud800'"


# Any JSON value, strings with lone surrogates and numbers past a float's range included.
_TEXT = st.text(st.characters() | st.integers(0xD800, 0xDFFF).map(chr), max_size=12)
_SCALARS = (
    st.none() | st.booleans() | st.floats() | _TEXT
    | st.integers() | st.integers(min_value=10**300, max_value=10**450)
)  # fmt: skip
_JSON = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_TEXT, inner, max_size=4),
    max_leaves=12,
)
# Events with some fields replaced by arbitrary values: close to valid, so the checks
# past the JSON parser are reached.
_FIELDS = ("event_id", "kind", "ts", "service", "host", "level", "message", "name", "value",
           "unit", "trace_id", "span_id", "parent_id", "duration_ms", "status")  # fmt: skip
_NEAR_EVENTS = st.builds(
    lambda base, changes: {**base, **changes},
    st.sampled_from(
        [
            {**BASE, "kind": "log", "level": "info", "message": "m"},
            {**BASE, "kind": "metric", "name": "cpu", "value": 1.5, "unit": "percent"},
            {**BASE, **SPAN, "duration_ms": 3.0, "parent_id": "p"},
        ]
    ),
    st.dictionaries(st.sampled_from(_FIELDS), _JSON, max_size=3),
)


def _encoded(doc_: Any) -> bytes:
    return json.dumps(doc_, allow_nan=True).encode()


_RECORDS = (
    st.none()
    | st.binary(max_size=64)
    | _JSON.map(_encoded)
    | _NEAR_EVENTS.map(_encoded)
    | st.integers(1, 5_000).map(lambda depth: b"[" * depth + b"]" * depth)
)


@settings(max_examples=400, deadline=None)
@given(st.lists(_RECORDS, min_size=1, max_size=8))
def test_validation_is_total(values: list[bytes | None]) -> None:
    """Whatever the bytes: an event or ``Invalid`` from validate, and a batch from
    parse_batch with one row per record, each a stored event or a reason."""
    for value in values:
        try:
            validate(value)
        except Invalid as exc:
            assert str(exc)
    out = parse_batch(_source_batch(values)).to_pydict()
    assert out["offset"] == list(range(len(values)))
    for event_id, reason in zip(out["event_id"], out["reason"], strict=True):
        assert (event_id is None) != (reason is None)
        if reason is not None:
            assert not reason.startswith("cannot be validated"), reason
