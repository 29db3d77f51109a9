"""The telemetry generator: realistic logs, metrics and spans, poison pills, ground truth.

``generate(...)`` is pure and deterministic for a seed: a stream of ``GeneratedRecord``
(key = event id, JSON value, lane, and the ``Event`` it encodes, or the kind of poison
it is). Event ids are ``<seed in hex>-<index>``: two runs with one seed send the same
ids, which the event store keeps once, so every run that is not a deliberate repeat
needs its own seed (``random_seed()``, what ``streamplane generate`` uses by default).
``produce(...)`` sends them through ``StreamProducer`` at a steady rate and returns the
``GroundTruth``; ``streamplane generate`` writes its summary as JSON.

Distributions: services have Zipf-like traffic shares, each with a few hosts; log
levels are mostly info (debug 15%, warn 8%, error 4%); metric values depend on the
metric (CPU percent, memory bytes, request counts); span durations are log-normal per
service with a heavy tail and ~2% errors; event time trails the send time by a few
milliseconds, and 3% of events arrive up to 20 s late. Spans and warn/error logs go to
the ``realtime`` lane, the rest to ``bulk`` (when the stream has those lanes).
"""

from __future__ import annotations

import json
import random
import secrets
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from streamplane.pipeline.events import Event, validate

SERVICES: tuple[tuple[str, float, float], ...] = (
    # name, traffic weight, median span latency (ms)
    ("checkout", 1.0, 45.0),
    ("search", 0.6, 25.0),
    ("payments", 0.4, 120.0),
    ("inventory", 0.3, 15.0),
    ("auth", 0.25, 8.0),
    ("recommendations", 0.15, 80.0),
    ("email", 0.08, 300.0),
)
HOSTS_PER_SERVICE = 4
KIND_WEIGHTS = (("log", 0.5), ("metric", 0.3), ("span", 0.2))
LEVEL_WEIGHTS = (("debug", 0.15), ("info", 0.73), ("warn", 0.08), ("error", 0.04))
METRICS = (("cpu.util", "percent"), ("mem.used", "bytes"), ("http.requests", "count"))
POISON_KINDS = (
    "truncated-json",
    "not-json",
    "missing-field",
    "bad-type",
    "unknown-kind",
    "negative-duration",
)
LATE_SHARE = 0.03
MAX_LATE_MS = 20_000


@dataclass(frozen=True)
class GeneratedRecord:
    key: bytes
    value: bytes
    lane: str
    event: Event | None  # None for a poison pill
    poison: str | None = None


@dataclass
class GroundTruth:
    """What was sent: counts, poison keys, and the valid events (for reference rollups)."""

    produced: int = 0
    duplicates_sent: int = 0
    by_kind: Counter[str] = field(default_factory=Counter)
    by_lane: Counter[str] = field(default_factory=Counter)
    poison: Counter[str] = field(default_factory=Counter)
    poison_keys: list[str] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    first_ts_ms: int | None = None
    last_ts_ms: int | None = None

    def add(self, rec: GeneratedRecord, duplicate: bool = False) -> None:
        self.produced += 1
        self.by_lane[rec.lane] += 1
        if duplicate:
            self.duplicates_sent += 1
            return
        if rec.event is None:
            assert rec.poison is not None
            self.poison[rec.poison] += 1
            self.poison_keys.append(rec.key.decode())
            return
        ev = rec.event
        self.by_kind[ev.kind] += 1
        self.events.append(ev)
        self.first_ts_ms = ev.ts_ms if self.first_ts_ms is None else min(self.first_ts_ms, ev.ts_ms)
        self.last_ts_ms = ev.ts_ms if self.last_ts_ms is None else max(self.last_ts_ms, ev.ts_ms)

    @property
    def valid(self) -> int:
        return len(self.events)

    def summary(self) -> dict[str, Any]:
        return {
            "produced": self.produced,
            "valid_events": self.valid,
            "duplicates_sent": self.duplicates_sent,
            "poison": sum(self.poison.values()),
            "poison_by_kind": dict(sorted(self.poison.items())),
            "events_by_kind": dict(sorted(self.by_kind.items())),
            "records_by_lane": dict(sorted(self.by_lane.items())),
            "first_event_ts_ms": self.first_ts_ms,
            "last_event_ts_ms": self.last_ts_ms,
            "poison_keys": sorted(self.poison_keys),
        }


def _pick(rng: random.Random, weighted: Sequence[tuple[str, float]]) -> str:
    return rng.choices([w[0] for w in weighted], weights=[w[1] for w in weighted])[0]


def _event_doc(rng: random.Random, event_id: str, ts_ms: int) -> dict[str, Any]:
    name, _, median = rng.choices(SERVICES, weights=[s[1] for s in SERVICES])[0]
    doc: dict[str, Any] = {
        "event_id": event_id,
        "kind": _pick(rng, KIND_WEIGHTS),
        "ts": ts_ms,
        "service": name,
        "host": f"{name}-{rng.randrange(HOSTS_PER_SERVICE)}",
    }
    kind = doc["kind"]
    if kind == "log":
        level = _pick(rng, LEVEL_WEIGHTS)
        doc["level"] = level
        doc["message"] = f"{level} in {name}: request {rng.getrandbits(32):08x} handled"
    elif kind == "metric":
        metric, unit = rng.choice(METRICS)
        if metric == "cpu.util":
            value: float = round(min(100.0, max(0.0, rng.gauss(45, 18))), 3)
        elif metric == "mem.used":
            value = float(int(rng.lognormvariate(21.5, 0.4)))
        else:
            value = float(int(rng.expovariate(1 / 120)))
        doc.update(name=metric, value=value, unit=unit)
    else:
        duration = round(rng.lognormvariate(0, 0.6) * median, 3)
        if rng.random() < 0.01:
            duration = round(duration * rng.uniform(5, 20), 3)  # the tail
        doc.update(
            trace_id=f"{rng.getrandbits(64):016x}",
            span_id=f"{rng.getrandbits(32):08x}",
            name=f"{name}.handle",
            duration_ms=duration,
            status="error" if rng.random() < 0.02 else "ok",
        )
        if rng.random() < 0.7:
            doc["parent_id"] = f"{rng.getrandbits(32):08x}"
    return doc


def _poison(rng: random.Random, doc: dict[str, Any]) -> tuple[str, bytes]:
    kind = rng.choice(POISON_KINDS)
    if kind == "truncated-json":
        text = json.dumps(doc)
        return kind, text[: max(1, len(text) // 2)].encode()
    if kind == "not-json":
        return kind, b"\x00\xffnot json " + rng.randbytes(8)
    if kind == "missing-field":
        doc.pop("service")
    elif kind == "bad-type":
        doc["ts"] = "yesterday"
    elif kind == "unknown-kind":
        doc["kind"] = "trace"
    else:
        doc.update(kind="span", duration_ms=-5.0, trace_id="t", span_id="s", name="x")
        doc["status"] = "ok"
    return kind, json.dumps(doc).encode()


def _lane(doc: dict[str, Any], lanes: Sequence[str]) -> str:
    urgent = doc.get("kind") == "span" or doc.get("level") in ("warn", "error")
    if "realtime" in lanes and "bulk" in lanes:
        return "realtime" if urgent else "bulk"
    return lanes[0]


def random_seed() -> int:
    """A seed for a run of its own: 48 random bits, so event ids of two runs do not meet."""
    return secrets.randbits(48)


def generate(
    count: int,
    *,
    seed: int,
    poison_ratio: float = 0.0,
    rate: float = 1000.0,
    start_ms: int | None = None,
    lanes: Sequence[str] = ("realtime", "bulk"),
) -> Iterator[GeneratedRecord]:
    """``count`` records, deterministic for ``seed`` (and ``start_ms``); the event ids
    are ``f"{seed:x}-{index:08d}"``."""
    rng = random.Random(seed)
    start = int(time.time() * 1000) if start_ms is None else start_ms
    step = 1000.0 / rate
    poison_rng = random.Random(seed ^ 0x5EED)
    for i in range(count):
        event_id = f"{seed:x}-{i:08d}"
        ts = start + int(i * step)
        if rng.random() < LATE_SHARE:
            ts -= rng.randrange(1, MAX_LATE_MS)
        doc = _event_doc(rng, event_id, ts)
        lane = _lane(doc, lanes)
        if poison_rng.random() < poison_ratio:
            kind, value = _poison(poison_rng, doc)
            yield GeneratedRecord(event_id.encode(), value, lane, None, kind)
        else:
            value = json.dumps(doc, separators=(",", ":")).encode()
            yield GeneratedRecord(event_id.encode(), value, lane, validate(value))


def produce(
    producer: Any,
    records: Iterator[GeneratedRecord],
    *,
    rate: float,
    duplicate_ratio: float = 0.0,
    seed: int = 1,
    on_progress: Callable[[int], None] | None = None,
) -> GroundTruth:
    """Send ``records`` at ``rate`` per second through ``producer`` (a StreamProducer).

    ``duplicate_ratio`` re-sends that share of valid events (as a retrying producer
    would): the event store must keep one copy.
    """
    truth = GroundTruth()
    rng = random.Random(seed ^ 0xD0B1E)
    started = time.monotonic()
    for i, rec in enumerate(records):
        ahead = started + i / rate - time.monotonic()
        if ahead > 0:
            time.sleep(ahead)
        producer.send(rec.value, key=rec.key, lane=rec.lane)
        truth.add(rec)
        if rec.event is not None and rng.random() < duplicate_ratio:
            producer.send(rec.value, key=rec.key, lane=rec.lane)
            truth.add(rec, duplicate=True)
        if on_progress is not None:
            on_progress(i + 1)
    producer.flush()
    return truth
