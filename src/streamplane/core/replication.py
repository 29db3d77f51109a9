"""How many copies of a topic a cluster keeps, and how many must hold a record before it
is acknowledged.

A topic gets ``DEFAULT_REPLICATION_FACTOR`` replicas, or as many as the cluster has live
brokers when it has fewer (``replication_factor``). With three replicas or more,
``min.insync.replicas`` is 2 (``min_insync_replicas``): one broker may be lost without
refusing writes (``acks=all``), and no record is acknowledged by one copy only, so one
disk lost loses no acknowledged record. Used for the streams' topics (the control
plane), the commit log's side topics (the client), the health topic and the brokers'
internal topics (the local fleet).

Where the replicas go is Kafka's choice, except on a cluster with brokers that are not
live (a broker killed stays registered, fenced): Kafka 4.4 put followers on the fenced
broker, the only one of its rack (replicas [1,3], ISR [1] for 4 of 12 partitions), so
those partitions took records with one copy from the start. Such a topic gets an
explicit ``replica_assignment`` over the live brokers instead (``kafka.admin``).
"""

from __future__ import annotations

from collections.abc import Mapping

from streamplane.exceptions import ConfigError

DEFAULT_REPLICATION_FACTOR = 3
MIN_INSYNC_REPLICAS = "min.insync.replicas"  # the topic config


def replication_factor(live_brokers: int, wanted: int | None = None) -> int:
    """The replicas a topic gets on a cluster of ``live_brokers`` brokers: ``wanted``
    (``DEFAULT_REPLICATION_FACTOR`` when None) capped at ``live_brokers``, at least 1."""
    if wanted is None:
        wanted = DEFAULT_REPLICATION_FACTOR
    return max(1, min(wanted, live_brokers))


def min_insync_replicas(replication_factor: int) -> int:
    """The ``min.insync.replicas`` of a topic of ``replication_factor`` replicas: 2 with 3
    or more (one broker may be lost without refusing writes, and no record is acknowledged
    by one copy only), else 1 (2 of 2 would refuse every write while one broker is down)."""
    return 2 if replication_factor >= 3 else 1


def parse_min_insync_replicas(value: str) -> int:
    """A ``min.insync.replicas`` value given in a topic config, as a number; ConfigError
    unless it is a positive integer."""
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise ConfigError(f"{MIN_INSYNC_REPLICAS} must be a positive integer, got {value!r}")
    return number


def check_min_insync_replicas(value: str, replication_factor: int) -> None:
    """ConfigError if a topic config's ``min.insync.replicas`` ``value`` is not a positive
    integer or is above ``replication_factor``: every write with ``acks=all`` would be
    refused (NOT_ENOUGH_REPLICAS), the topic taking reads only."""
    if parse_min_insync_replicas(value) > replication_factor:
        raise ConfigError(
            f"{MIN_INSYNC_REPLICAS}={value} is above the replication factor "
            f"{replication_factor}: every write with acks=all would be refused (set it to "
            f"at most {replication_factor}, or leave it out: "
            f"{min_insync_replicas(replication_factor)} with {replication_factor} replicas)"
        )


def topic_min_insync_replicas(own: str | None, replication_factor: int) -> str:
    """The ``min.insync.replicas`` a topic of ``replication_factor`` replicas gets: ``own``
    (the one its stream's config sets, checked by ``check_min_insync_replicas`` when the
    stream was created) capped at ``replication_factor`` (topics made with fewer replicas,
    by a failover to a cluster with fewer brokers), else ``min_insync_replicas``."""
    if own is None:
        return str(min_insync_replicas(replication_factor))
    if parse_min_insync_replicas(own) > replication_factor:
        return str(replication_factor)
    return own


def replica_assignment(
    partitions: int, live_brokers: Mapping[int, str | None], replicas: int, first: int = 0
) -> list[list[int]]:
    """Each partition's replicas, leader first, on ``live_brokers`` (id -> rack) only.

    The brokers are taken in rack-alternating order (``rack_alternating``); partition p
    is led by the (``first`` + p)-th of them, its followers the next ones in that order.
    So leaders are spread evenly (counts differ by one at most), no broker holds two
    replicas of a partition, and a partition's replicas are on distinct racks when the
    racks have as many brokers each. ``first`` turns the start (a value per topic keeps
    every topic's partition 0 off the same broker). ConfigError unless 1 <= ``replicas``
    <= the live brokers and ``partitions`` >= 1."""
    order = rack_alternating(live_brokers)
    if partitions < 1:
        raise ConfigError(f"a topic needs at least 1 partition, got {partitions}")
    if not 1 <= replicas <= len(order):
        raise ConfigError(
            f"{replicas} replicas cannot be placed on {len(order)} live brokers "
            f"({', '.join(map(str, order)) or 'none'})"
        )
    return [
        [order[(first + p + i) % len(order)] for i in range(replicas)] for p in range(partitions)
    ]


def rack_alternating(brokers: Mapping[int, str | None]) -> list[int]:
    """Broker ids ordered so that neighbours are on different racks where possible: the
    first broker of each rack (racks by name, no rack last), then the second of each, and
    so on, brokers of a rack by id."""
    racks: dict[str, list[int]] = {}
    for broker in sorted(brokers):
        racks.setdefault(brokers[broker] or "", []).append(broker)
    columns = [racks[name] for name in sorted(racks, key=lambda r: (r == "", r))]
    depth = max((len(c) for c in columns), default=0)
    return [c[row] for row in range(depth) for c in columns if row < len(c)]
