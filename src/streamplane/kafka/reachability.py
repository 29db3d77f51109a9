"""Whether a Kafka cluster's clients reach any of its brokers, told in the log.

librdkafka reconnects by itself and tells the application nothing while it does: a
cluster that dropped out and came back without a failover left no line in a
producer's or consumer's log (its records only waited). ``ClusterReachability`` tells
an outage of a cluster in one WARNING (its several clients each report it; the first
says it) and its end in one INFO line with how long it lasted.

A client's ``_ALL_BROKERS_DOWN`` error is confirmed by its next statistics
(``statistics.interval.ms``) before it is told: librdkafka also raises it in passing
while it reconnects (``0/2 brokers are down``, seen right after a broker came back),
so the WARNING comes one statistics interval after the error, and an outage shorter
than that is not told. The outage ends at the first statistics of a client that
reported it with a broker up (not a bootstrap address); a client's error callback and
its statistics are served from the same queue in order, so its own statistics cannot
show brokers up from before it lost them, while another client's could. Nothing is
told once the owner closes (``close``: librdkafka reports a client's brokers down as
it lets them go). A fatal client error (an idempotent producer fenced, say) is an
ERROR; other client errors (one broker of several disconnected, a timed-out request:
librdkafka retries them) are DEBUG.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import KafkaError


class ClusterReachability:
    """One owner's (a producer's, a consumer's) view of its clusters' reachability.

    ``owner`` starts each line (``stream 'orders' (group indexer)``); lines go to
    ``logger`` (the owner's module logger)."""

    def __init__(
        self,
        owner: str,
        logger: logging.Logger,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.owner = owner
        self.log = logger
        self.clock = clock
        self._lock = threading.Lock()
        # Clusters in an outage: since when, and the clients that reported it.
        self._down: dict[str, tuple[float, set[ClientReachability]]] = {}
        self._closed = False

    def client(self, cluster: str) -> ClientReachability:
        """The reachability of one more client of ``cluster``: give its ``on_error``
        to the client as ``error_cb`` and feed it the client's parsed statistics."""
        return ClientReachability(self, cluster)

    def is_down(self, cluster: str) -> bool:
        return cluster in self._down

    def close(self) -> None:
        """Say nothing more: the owner is letting its clients go (librdkafka reports a
        client's brokers down as it closes them)."""
        self._closed = True

    def _went_down(self, client: ClientReachability, since: float) -> None:
        if self._closed:
            return
        with self._lock:
            outage = self._down.get(client.cluster)
            if outage is not None:
                outage[1].add(client)
                return
            self._down[client.cluster] = (since, {client})
        self.log.warning(
            "%s: Kafka cluster %r unreachable: none of its brokers answers (the client "
            "keeps reconnecting; its records wait meanwhile)",
            self.owner,
            client.cluster,
        )

    def _came_back(self, client: ClientReachability) -> None:
        with self._lock:
            outage = self._down.get(client.cluster)
            if outage is None or client not in outage[1]:
                return
            del self._down[client.cluster]
        self.log.info(
            "%s: Kafka cluster %r reachable again after %.1f s",
            self.owner,
            client.cluster,
            self.clock() - outage[0],
        )


class ClientReachability:
    """What one Kafka client of a cluster tells of its brokers (``ClusterReachability``)."""

    __slots__ = ("_cluster_view", "_unconfirmed_since", "cluster")

    def __init__(self, cluster_view: ClusterReachability, cluster: str) -> None:
        self._cluster_view = cluster_view
        self.cluster = cluster
        # When it said its brokers were all down, until its statistics say so too.
        self._unconfirmed_since: float | None = None

    def on_error(self, err: KafkaError) -> None:
        """librdkafka's ``error_cb`` (served from the client's poll or consume)."""
        view = self._cluster_view
        if err.code() == KafkaError._ALL_BROKERS_DOWN:
            if self._unconfirmed_since is None:
                self._unconfirmed_since = view.clock()
        elif err.fatal():
            view.log.error(
                "%s: Kafka cluster %r: fatal client error: %s", view.owner, self.cluster, err.str()
            )
        else:
            view.log.debug("%s: Kafka cluster %r: %s", view.owner, self.cluster, err.str())

    def on_statistics(self, stats: Mapping[str, Any]) -> None:
        """The client's parsed statistics: whether a broker of the cluster is up (not
        a bootstrap address: ``nodeid`` -1) confirms or dismisses the outage it
        reported, and ends one it confirmed."""
        view = self._cluster_view
        since = self._unconfirmed_since
        if since is None and self.cluster not in view._down:
            return
        brokers = stats.get("brokers") or {}
        up = any(b.get("state") == "UP" and b.get("nodeid", -1) >= 0 for b in brokers.values())
        self._unconfirmed_since = None
        if up:
            view._came_back(self)
        elif since is not None:
            view._went_down(self, since)
