"""Storage metrics for the mapper: partition sizes and broker free storage.

kafka-kit's metricsfetcher copies them from Datadog into ZooKeeper; we read them from
the cluster itself (DescribeLogDirs) or, optionally, from a Prometheus text-format
endpoint, and cache one snapshot for ``max_age`` seconds so a planning session does
not ask every broker again for every step.

Sources (``StorageSource``):

- ``LogDirsSource(admin)``: per replica sizes from DescribeLogDirs; free and total
  storage from each log dir's ``usable_bytes`` / ``total_bytes`` (DescribeLogDirs v4,
  Kafka 3.3+; Kafka 4.x reports them). With ``capacity`` set, a broker's total is that
  figure and its free storage is ``capacity - bytes it holds``: use it when brokers
  share one filesystem (the local fleet, where every broker reports the same disk) or
  to plan against a storage budget smaller than the disk.
- ``PrometheusSource(fetch)``: a partition-size metric with topic / partition / broker
  labels and a free-bytes metric with a broker label (names configurable; defaults
  follow the usual JMX-exporter naming ``kafka_log_log_size``).

``cluster_view(admin, fetcher, ...)`` turns a snapshot plus the cluster's metadata into
the mapper's ``PartitionMap`` and ``BrokerMap``: live brokers with their racks, and
brokers that hold replicas but are not alive as ``dead``.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from streamplane.core.mapper.models import (
    Broker,
    BrokerMap,
    BrokerState,
    Partition,
    PartitionMap,
    TopicPartition,
)
from streamplane.core.text import human_bytes
from streamplane.exceptions import ConfigError, KafkaError
from streamplane.ops.kafka_ops import OpsAdmin, PartitionState


@dataclass(frozen=True)
class StorageReading:
    """What one read of a source gives."""

    replica_sizes: Mapping[tuple[int, TopicPartition], int]
    """(broker, (topic, partition)) -> bytes of that replica."""
    free: Mapping[int, int]
    total: Mapping[int, int]
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class StorageSnapshot:
    """A reading with the time it was taken (the fetcher's clock)."""

    taken_at: float
    reading: StorageReading

    @property
    def replica_sizes(self) -> Mapping[tuple[int, TopicPartition], int]:
        return self.reading.replica_sizes

    def partition_sizes(self) -> dict[TopicPartition, int]:
        """The largest replica of each partition (a lagging replica is smaller)."""
        out: dict[TopicPartition, int] = {}
        for (_, key), size in self.reading.replica_sizes.items():
            out[key] = max(out.get(key, 0), size)
        return out

    def held(self) -> dict[int, int]:
        """Bytes held per broker."""
        out: dict[int, int] = {}
        for (bid, _), size in self.reading.replica_sizes.items():
            out[bid] = out.get(bid, 0) + size
        return out


class StorageSource(Protocol):
    def read(self) -> StorageReading: ...


@dataclass
class LogDirsSource:
    """Sizes and free storage from DescribeLogDirs (see the module docstring)."""

    admin: OpsAdmin
    capacity: int | Mapping[int, int] | None = None

    def read(self) -> StorageReading:
        answers = self.admin.log_dirs()
        sizes: dict[tuple[int, TopicPartition], int] = {}
        free: dict[int, int] = {}
        total: dict[int, int] = {}
        warnings: list[str] = []
        unreported: list[int] = []
        held_by: dict[int, int] = {}
        over: list[str] = []  # brokers holding more than the capacity given
        for bid, dirs in sorted(answers.items()):
            if isinstance(dirs, KafkaError):
                warnings.append(f"broker {bid}: log dirs not readable ({dirs})")
                continue
            held = 0
            usable_sum = total_sum = 0
            reported = True
            for d in dirs:
                if d.error is not None:
                    warnings.append(f"broker {bid}: log dir {d.path} is offline ({d.error})")
                    continue
                for key, size in d.sizes.items():
                    sizes[(bid, key)] = max(sizes.get((bid, key), 0), size)
                    held += size
                if d.usable_bytes is None or d.total_bytes is None:
                    reported = False
                else:
                    usable_sum += d.usable_bytes
                    total_sum += d.total_bytes
            held_by[bid] = held
            cap = self.capacity.get(bid) if isinstance(self.capacity, Mapping) else self.capacity
            if cap is not None:
                total[bid] = cap
                free[bid] = max(cap - held, 0)
                if held > cap:
                    over.append(f"{bid} ({human_bytes(held)})")
            elif reported:
                total[bid] = total_sum
                free[bid] = min(usable_sum, total_sum)
            else:
                unreported.append(bid)
        if unreported:
            warnings.append(
                f"broker(s) {unreported} do not report free storage (DescribeLogDirs < v4): "
                "give a capacity"
            )
        if over:
            warnings.append(
                f"broker(s) {', '.join(over)} hold more than the capacity given: counted as "
                "full (no free storage)"
            )
        if self.capacity is None and shares_one_filesystem(total, free, held_by):
            warnings.append(
                "every broker reports the same total and about the same free storage, "
                "whatever it holds: they probably share one filesystem; give a capacity "
                "to plan by the bytes each holds"
            )
        return StorageReading(sizes, free, total, tuple(warnings))


# Below this difference between what brokers hold, their free storage tells nothing.
_MIN_HELD_SPREAD = 1 << 20


def shares_one_filesystem(
    total: Mapping[int, int], free: Mapping[int, int], held: Mapping[int, int]
) -> bool:
    """Do brokers reporting these figures (per broker: total and free storage, bytes
    held) look like one filesystem? On disks of their own of one size, a broker holding
    more has that much less free: free plus held is about the same for each. On one
    filesystem, free is the same for each whatever it holds. So: equal totals, and free
    storage spread over less than a quarter of how much free plus held is. (Before, only
    byte-for-byte equal figures were flagged, and the local fleet, written to between
    the brokers' answers, often was not.)"""
    ids = [b for b in free if b in total]
    if len(ids) < 2 or len({total[b] for b in ids}) != 1:
        return False

    def spread(values: list[int]) -> int:
        return max(values) - min(values)

    if spread([held.get(b, 0) for b in ids]) < _MIN_HELD_SPREAD:
        return False  # they hold about the same: cannot tell
    return 4 * spread([free[b] for b in ids]) < spread([free[b] + held.get(b, 0) for b in ids])


_SAMPLE = re.compile(
    r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>.*)\})?\s+(?P<value>\S+)(?:\s+\S+)?$"
)
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_prometheus_text(text: str) -> list[tuple[str, dict[str, str], float]]:
    """Samples of the Prometheus text exposition format: ``(name, labels, value)``."""
    out: list[tuple[str, dict[str, str], float]] = []
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if m is None:
            raise ConfigError(f"prometheus text line {n} is not a sample: {line[:80]!r}")
        labels = {
            k: v.replace('\\"', '"').replace("\\n", "\n").replace("\\\\", "\\")
            for k, v in _LABEL.findall(m.group("labels") or "")
        }
        try:
            value = float(m.group("value"))
        except ValueError as exc:
            raise ConfigError(f"prometheus text line {n}: bad value {m.group('value')!r}") from exc
        out.append((m.group("name"), labels, value))
    return out


@dataclass
class PrometheusSource:
    """Sizes and free storage from a Prometheus text-format endpoint (or any text)."""

    fetch: Callable[[], str]
    size_metric: str = "kafka_log_log_size"
    free_metric: str = "kafka_broker_storage_free_bytes"
    total_metric: str = "kafka_broker_storage_total_bytes"
    broker_label: str = "broker"
    topic_label: str = "topic"
    partition_label: str = "partition"

    @classmethod
    def from_url(cls, url: str, timeout: float = 10.0, **kwargs: str) -> PrometheusSource:
        import httpx

        def fetch() -> str:
            try:
                resp = httpx.get(url, timeout=timeout)
                resp.raise_for_status()
            except httpx.HTTPError as exc:
                raise ConfigError(f"prometheus source {url}: {exc}") from exc
            return resp.text

        return cls(fetch, **kwargs)

    def read(self) -> StorageReading:
        sizes: dict[tuple[int, TopicPartition], int] = {}
        free: dict[int, int] = {}
        total: dict[int, int] = {}
        skipped = 0
        for name, labels, value in parse_prometheus_text(self.fetch()):
            if name not in (self.size_metric, self.free_metric, self.total_metric):
                continue
            try:
                bid = int(labels[self.broker_label])
                amount = int(value) if math.isfinite(value) and value >= 0 else -1
            except (KeyError, ValueError):
                skipped += 1
                continue
            if amount < 0:
                skipped += 1
            elif name == self.size_metric:
                try:
                    key = (labels[self.topic_label], int(labels[self.partition_label]))
                except (KeyError, ValueError):
                    skipped += 1
                    continue
                sizes[(bid, key)] = amount
            elif name == self.free_metric:
                free[bid] = amount
            else:
                total[bid] = amount
        for bid, f in free.items():
            total.setdefault(bid, f)
        warnings = (
            (f"prometheus source: {skipped} samples without usable labels",) if skipped else ()
        )
        return StorageReading(sizes, free, total, warnings)


class MetricsFetcher:
    """One cached ``StorageSnapshot``, refreshed when older than ``max_age`` seconds."""

    def __init__(
        self,
        source: StorageSource,
        *,
        max_age: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_age < 0:
            raise ConfigError("max_age must be >= 0")
        self.source = source
        self.max_age = max_age
        self._clock = clock
        self._snapshot: StorageSnapshot | None = None

    def snapshot(self, *, max_age: float | None = None) -> StorageSnapshot:
        limit = self.max_age if max_age is None else max_age
        now = self._clock()
        if self._snapshot is None or now - self._snapshot.taken_at > limit:
            self._snapshot = StorageSnapshot(now, self.source.read())
        return self._snapshot

    def invalidate(self) -> None:
        self._snapshot = None


@dataclass(frozen=True)
class ClusterView:
    """The mapper's view of a cluster: selected partitions and every broker."""

    partitions: PartitionMap
    brokers: BrokerMap
    states: Mapping[TopicPartition, PartitionState]
    warnings: tuple[str, ...] = ()
    all_partitions: Mapping[TopicPartition, PartitionState] = field(default_factory=dict)


def topic_filter(patterns: Sequence[str], include_internal: bool = False) -> Callable[[str], bool]:
    """Regexes (full match) selecting topics; none selects every non-internal topic."""
    try:
        compiled = [re.compile(p) for p in patterns]
    except re.error as exc:
        raise ConfigError(f"invalid topic pattern: {exc}") from exc

    def wanted(topic: str) -> bool:
        if not include_internal and topic.startswith("__"):
            return False
        return not compiled or any(c.fullmatch(topic) for c in compiled)

    return wanted


def cluster_view(
    admin: OpsAdmin,
    fetcher: MetricsFetcher | None,
    *,
    topics: Sequence[str] = (),
    include_internal: bool = False,
    states: Mapping[int, BrokerState] | None = None,
    racks: Mapping[int, str] | None = None,
    new_when_empty: bool = True,
) -> ClusterView:
    """Read metadata (and storage, when ``fetcher`` is given) into the mapper's models.

    - live brokers are ``active``; a live broker holding no replica of any topic is
      ``new`` when ``new_when_empty`` (it just joined);
    - a broker id that holds replicas but is not alive is ``dead`` (its rack from
      ``racks`` when known, else inferred by the mapper where it needs one);
    - ``states`` overrides any of these (e.g. ``{3: RETIRING}``).
    """
    live = admin.brokers()
    everything = admin.partitions()
    wanted = topic_filter(topics, include_internal)
    selected = {k: s for k, s in everything.items() if wanted(k[0])}
    if topics and not selected:
        raise ConfigError(f"no topic matches {list(topics)}")
    snapshot = fetcher.snapshot() if fetcher is not None else None
    sizes = snapshot.partition_sizes() if snapshot is not None else {}
    warnings = list(snapshot.reading.warnings) if snapshot is not None else []
    holding = {b for s in everything.values() for b in s.replicas}
    overrides = dict(states or {})
    unknown = sorted(set(overrides) - set(live) - holding)
    if unknown:
        raise ConfigError(f"unknown broker(s) {unknown} (live: {sorted(live)})")
    brokers: list[Broker] = []
    for bid in sorted(set(live) | holding):
        node = live.get(bid)
        if node is None:
            state = BrokerState.DEAD
            rack = (racks or {}).get(bid)
        else:
            state = BrokerState.NEW if new_when_empty and bid not in holding else BrokerState.ACTIVE
            rack = node.rack
        state = overrides.get(bid, state)
        free = total = 0
        if snapshot is not None and state is not BrokerState.DEAD:
            free = snapshot.reading.free.get(bid, 0)
            total = snapshot.reading.total.get(bid, 0)
            if bid not in snapshot.reading.free:
                warnings.append(f"broker {bid}: no storage figures")
        brokers.append(Broker(bid, rack, free, max(total, free), state))
    pmap = PartitionMap(
        Partition(s.topic, s.partition, s.replicas, sizes.get(s.key, 0)) for s in selected.values()
    )
    return ClusterView(pmap, BrokerMap(brokers), selected, tuple(warnings), everything)


def live_partitions(
    admin: OpsAdmin, keys: Collection[TopicPartition]
) -> dict[TopicPartition, PartitionState]:
    """Current state of ``keys`` (one describe of their topics)."""
    states = admin.partitions({t for t, _ in keys})
    return {k: states[k] for k in keys if k in states}
