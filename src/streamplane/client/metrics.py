"""Client-side metrics: plain integers on the hot path, Prometheus at scrape time.

The producer and the consumer count with one dictionary increment per event
(``METRICS.produced[(stream, lane)] += 1``) and observe latencies into fixed-bucket
``Histogram`` objects (a bisect and two additions). Nothing here calls
prometheus-client per record: ``ClientMetricsCollector`` turns the counts into metric
families only when ``REGISTRY`` is scraped.

Exposing them from an application::

    from streamplane.client.metrics import REGISTRY, start_http_server
    start_http_server(9108)              # or: prometheus_client.generate_latest(REGISTRY)

Names (all prefixed ``streamplane_client_``; labels in braces):

- ``produced_total{stream,lane}`` (records handed to ``send``), ``acked_total{stream,lane}``
  and ``produce_errors_total{stream,lane}`` (a producer counts per topic and hands the
  counts over every 1,000 sends and at ``poll``/``flush``; acknowledged records are
  counted as ``sent - failed - still queued``),
  ``produce_latency_seconds{stream}`` (send to acknowledgement, histogram estimated
  from librdkafka's statistics every few seconds, see ``produce_latency_windows``)
- ``consumed_total{stream,cluster,topic,partition}`` (records fetched: throughput per
  partition) and ``fetch_latency_seconds{stream,cluster}`` (ingestion time to fetch of
  the first record of each fetched batch, histogram)
- ``handled_total{stream,group,outcome}`` with outcome ``acked``, ``nacked``,
  ``rejected``, ``dlq``: read at scrape time from every live ``StreamConsumer``'s own
  ``stats`` (no extra work per record). What a consumer counted stays in both this and
  ``consumed_total`` after it closes, and what a partition fetched after the consumer
  gives it up.
- ``commit_metadata_bytes{stream,bootstrap}`` (histogram of commit metadata sizes, one
  observation per partition commit) and ``commits_total{stream,bootstrap}``

Counters are process-wide and never reset (Prometheus computes rates). Increments from
several threads may race under free-threaded Python; with the GIL a ``+= 1`` on a dict
entry can lose an update only across a thread switch inside it, which metrics tolerate.
"""

from __future__ import annotations

import time
import weakref
from bisect import bisect_left
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client import start_http_server as _start_http_server
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

__all__ = [
    "LATENCY_BUCKETS_S",
    "METRICS",
    "REGISTRY",
    "SIZE_BUCKETS_BYTES",
    "ClientMetrics",
    "ClientMetricsCollector",
    "Histogram",
    "start_http_server",
]

LATENCY_BUCKETS_S: tuple[float, ...] = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)  # fmt: skip
SIZE_BUCKETS_BYTES: tuple[float, ...] = (32, 64, 128, 256, 512, 1024, 2048, 3072, 4096, 65536)

PREFIX = "streamplane_client_"


class Histogram:
    """Fixed buckets of plain ints; ``observe`` costs a bisect and two additions."""

    __slots__ = ("bounds", "count", "counts", "sum")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)  # the last one is +Inf
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value
        self.count += 1

    def observe_many(self, value: float, n: int) -> None:
        """``n`` observations of ``value``."""
        self.counts[bisect_left(self.bounds, value)] += n
        self.sum += value * n
        self.count += n

    def cumulative(self) -> list[tuple[str, float]]:
        """Prometheus buckets: (upper bound, observations <= it), +Inf last."""
        out = []
        running = 0
        for bound, n in zip((*self.bounds, float("inf")), self.counts, strict=True):
            running += n
            out.append(("+Inf" if bound == float("inf") else repr(float(bound)), float(running)))
        return out


# librdkafka's latency windows give percentiles; each stands for the records between the
# previous percentile and itself (an upper bound for them: never an understatement).
_WINDOW_SHARES: tuple[tuple[str, float], ...] = (
    ("p50", 0.50), ("p75", 0.25), ("p90", 0.15), ("p95", 0.05), ("p99", 0.04),
    ("p99_99", 0.0099), ("max", 0.0001),
)  # fmt: skip


def latency_window_points(stats: Mapping[str, Any]) -> list[tuple[float, int]]:
    """(seconds, records) points that approximate the produce latency of the records a
    librdkafka producer sent in its last statistics window.

    Per broker, a record's latency is its time in the producer's queue
    (``int_latency``, one sample per record), in the output buffer (``outbuf_latency``)
    and the produce request's round trip (``rtt``), all in microseconds; the windows
    only give percentiles, so the point for each percentile adds the three.
    """
    points: list[tuple[float, int]] = []
    for broker in stats.get("brokers", {}).values():
        if broker.get("nodeid", -1) < 0:
            continue  # bootstrap and internal pseudo-brokers
        queue, outbuf, rtt = broker["int_latency"], broker["outbuf_latency"], broker["rtt"]
        records = int(queue.get("cnt", 0))
        given = 0
        share = 0.0
        for name, part in _WINDOW_SHARES:
            share += part
            n = round(records * share) - given  # cumulative rounding: they add up
            if n > 0:
                seconds = (queue[name] + outbuf.get(name, 0) + rtt.get(name, 0)) / 1e6
                points.append((seconds, n))
                given += n
    return points


def _lane_of(topic: str | None) -> str:
    """The lane of a derived topic name ``sp.<stream>.<lane>.e<epoch>`` ("" if not one)."""
    parts = (topic or "").rsplit(".", 2)
    return parts[-2] if len(parts) == 3 else ""


class _Histograms(dict[tuple[str, ...], Histogram]):
    def __init__(self, bounds: Sequence[float]) -> None:
        super().__init__()
        self._bounds = tuple(bounds)

    def __missing__(self, key: tuple[str, ...]) -> Histogram:
        h = self[key] = Histogram(self._bounds)
        return h


class ClientMetrics:
    """Every client counter of the process (``METRICS`` is the one the library uses)."""

    def __init__(self) -> None:
        self.produced: defaultdict[tuple[str, str], int] = defaultdict(int)
        self.delivered: defaultdict[tuple[str, str], int] = defaultdict(int)
        self.produce_errors: defaultdict[tuple[str, str], int] = defaultdict(int)
        self.commits: defaultdict[tuple[str, str], int] = defaultdict(int)
        self.commit_metadata_bytes = _Histograms(SIZE_BUCKETS_BYTES)
        self.produce_latency = _Histograms(LATENCY_BUCKETS_S)
        self.fetch_latency = _Histograms(LATENCY_BUCKETS_S)
        self.consumers: weakref.WeakSet[Any] = weakref.WeakSet()
        # What consumers that closed, and partitions that were given up, had counted:
        # the counters read from live consumers never go down when one goes away.
        self.consumed_before: defaultdict[tuple[str, str, str, int], int] = defaultdict(int)
        self.handled_before: defaultdict[tuple[str, str, str], int] = defaultdict(int)

    def delivery_failed(self, stream: str, topic: str | None) -> None:
        """One failed delivery (served by the producer's poll); the lane comes from the
        derived topic name ``sp.<stream>.<lane>.e<epoch>``."""
        self.produce_errors[(stream, _lane_of(topic))] += 1

    def produce_latency_windows(self, stream: str, stats: Mapping[str, Any]) -> None:
        """A producer's librdkafka statistics (parsed): its latency windows into the
        histogram."""
        try:
            points = latency_window_points(stats)
        except (ValueError, KeyError, TypeError, AttributeError):
            return  # statistics of an unexpected shape: no latency, never an error
        h = self.produce_latency[(stream,)]
        for seconds, n in points:
            h.observe_many(seconds, n)

    def fetch_latency_of(self, stream: str, cluster: str, first: Any) -> None:
        """The ingestion-to-fetch latency of a fetched batch's first record. (Records per
        partition are counted by the consumers' partition states, read at scrape time.)"""
        ts = first.timestamp()[1]
        if ts > 0:
            self.fetch_latency[(stream, cluster)].observe(max(0.0, time.time() - ts / 1000.0))

    def consumed_counts(self) -> dict[tuple[str, str, str, int], int]:
        """(stream, cluster, topic, partition) -> records fetched, over live consumers
        and what closed consumers and given-up partitions had fetched."""
        out = dict(self.consumed_before)
        for c in list(self.consumers):
            for key, n in _consumed_by(c, list(getattr(c, "_states", {}).values())):
                out[key] = out.get(key, 0) + n
        return out

    def track_consumer(self, consumer: Any) -> None:
        """Export ``consumer.stats`` (acked, nacked, rejected, dlq) while it lives."""
        self.consumers.add(consumer)

    def partitions_released(self, consumer: Any, states: Iterable[Any]) -> None:
        """``consumer`` gave up these partition states: keep what they fetched."""
        for key, n in _consumed_by(consumer, states):
            self.consumed_before[key] += n

    def untrack_consumer(self, consumer: Any) -> None:
        """``consumer`` closed: keep its counts, stop reading it (once)."""
        if consumer not in self.consumers:
            return
        self.consumers.discard(consumer)
        self.partitions_released(consumer, list(getattr(consumer, "_states", {}).values()))
        for key, n in _handled_by(consumer):
            self.handled_before[key] += n

    def committed(self, stream: str, bootstrap: str, encoded: Iterable[Any]) -> None:
        """A commit round to one cluster: each partition's encoded metadata (``.size``)."""
        h = self.commit_metadata_bytes[(stream, bootstrap)]
        n = 0
        for e in encoded:
            h.observe(e.size)
            n += 1
        self.commits[(stream, bootstrap)] += n

    def handled(self) -> dict[tuple[str, str, str], int]:
        """(stream, group, outcome) -> count, summed over the live consumers and what
        closed consumers had counted."""
        out = dict(self.handled_before)
        for c in list(self.consumers):
            for key, n in _handled_by(c):
                out[key] = out.get(key, 0) + n
        return out

    def reset(self) -> None:
        """Forget everything (tests)."""
        self.__init__()  # type: ignore[misc]


def _consumed_by(
    consumer: Any, states: Iterable[Any]
) -> Iterator[tuple[tuple[str, str, str, int], int]]:
    stream = str(getattr(consumer, "stream", ""))
    for state in states:
        k = state.key
        yield (stream, k.cluster, k.topic, k.partition), state.fetched


def _handled_by(consumer: Any) -> Iterator[tuple[tuple[str, str, str], int]]:
    stats = getattr(consumer, "stats", {})
    stream, group = str(getattr(consumer, "stream", "")), str(getattr(consumer, "group", ""))
    for outcome in ("acked", "nacked", "rejected", "dlq"):
        yield (stream, group, outcome), int(stats.get(outcome, 0))


METRICS = ClientMetrics()


def _counter(
    name: str, doc: str, labels: Sequence[str], values: Mapping[Any, int]
) -> CounterMetricFamily:
    family = CounterMetricFamily(PREFIX + name, doc, labels=list(labels))
    for key, value in list(values.items()):
        family.add_metric([str(k) for k in key], value)
    return family


def _histogram(
    name: str, doc: str, labels: Sequence[str], values: Mapping[Any, Histogram]
) -> HistogramMetricFamily:
    family = HistogramMetricFamily(PREFIX + name, doc, labels=list(labels))
    for key, h in list(values.items()):
        family.add_metric([str(k) for k in key], h.cumulative(), h.sum)
    return family


class ClientMetricsCollector(Collector):
    """Exports a ``ClientMetrics`` at scrape time."""

    def __init__(self, metrics: ClientMetrics = METRICS) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Metric]:
        m = self.metrics
        sl = ("stream", "lane")
        yield _counter("produced", "Records handed to send().", sl, m.produced)
        yield _counter("acked", "Records the brokers acknowledged.", sl, m.delivered)
        yield _counter("produce_errors", "Records that failed delivery.", sl, m.produce_errors)
        yield _counter(
            "consumed",
            "Records fetched, per partition.",
            ("stream", "cluster", "topic", "partition"),
            m.consumed_counts(),
        )
        yield _counter(
            "handled",
            "Consumed records by outcome (acked, nacked, rejected, dlq).",
            ("stream", "group", "outcome"),
            m.handled(),
        )
        sb = ("stream", "bootstrap")
        yield _counter("commits", "Partition commits.", sb, m.commits)
        yield _histogram(
            "commit_metadata_bytes",
            "Size of the commit metadata per partition commit.",
            sb,
            m.commit_metadata_bytes,
        )
        yield _histogram(
            "produce_latency_seconds",
            "From send() to the acknowledgement (estimated from librdkafka's windows).",
            ("stream",),
            m.produce_latency,
        )
        yield _histogram(
            "fetch_latency_seconds",
            "From ingestion (LogAppendTime) to fetch, first record of each batch.",
            ("stream", "cluster"),
            m.fetch_latency,
        )


REGISTRY = CollectorRegistry(auto_describe=False)
REGISTRY.register(ClientMetricsCollector(METRICS))


def start_http_server(port: int, addr: str = "127.0.0.1") -> None:
    """Serve ``REGISTRY`` on ``http://addr:port/metrics`` from a daemon thread."""
    _start_http_server(port, addr=addr, registry=REGISTRY)
