"""How many copies of a topic a cluster keeps, and how many must hold a record before it
is acknowledged.

A topic gets ``DEFAULT_REPLICATION_FACTOR`` replicas, or as many as the cluster has live
brokers when it has fewer (``replication_factor``). With three replicas or more,
``min.insync.replicas`` is 2 (``min_insync_replicas``): one broker may be lost without
refusing writes (``acks=all``), and no record is acknowledged by one copy only, so one
disk lost loses no acknowledged record. Used for the streams' topics (the control
plane), the commit log's side topics (the client), the health topic and the brokers'
internal topics (the local fleet).
"""

from __future__ import annotations

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
