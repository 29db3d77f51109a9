"""ClusterReachability: a cluster whose brokers all dropped out, and its return, told
once each per outage in the owner's log."""

from __future__ import annotations

import logging

import pytest
from confluent_kafka import KafkaError

from streamplane.kafka.reachability import ClusterReachability

LOGGER = "test.reachability"
DOWN = KafkaError(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down")
BROKER_UP = {"brokers": {"localhost:9092/1": {"nodeid": 1, "state": "UP"}}}
BROKER_DOWN = {"brokers": {"localhost:9092/1": {"nodeid": 1, "state": "DOWN"}}}
BOOTSTRAP_UP = {"brokers": {"localhost:9092/bootstrap": {"nodeid": -1, "state": "UP"}}}


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def lines(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    return [(r.levelno, r.getMessage()) for r in caplog.records if r.name == LOGGER]


@pytest.fixture
def reach(caplog: pytest.LogCaptureFixture) -> tuple[ClusterReachability, Clock]:
    caplog.set_level(logging.DEBUG, LOGGER)
    clock = Clock()
    return ClusterReachability("stream 'orders'", logging.getLogger(LOGGER), clock), clock


def test_an_outage_is_one_warning_and_its_end_one_info_with_its_length(
    reach: tuple[ClusterReachability, Clock], caplog: pytest.LogCaptureFixture
) -> None:
    view, clock = reach
    fetcher, committer = view.client("local-b"), view.client("local-b")
    fetcher.on_statistics(BROKER_UP)  # up and never down: nothing to say
    fetcher.on_error(DOWN)
    clock.now += 1
    fetcher.on_error(DOWN)
    assert not view.is_down("local-b")  # not until its statistics say so too
    clock.now += 1
    fetcher.on_statistics(BROKER_DOWN)
    assert view.is_down("local-b")
    committer.on_error(DOWN)  # the same outage, told by the cluster's other client
    committer.on_statistics(BROKER_DOWN)
    fetcher.on_statistics(BROKER_DOWN)
    fetcher.on_statistics(BOOTSTRAP_UP)  # a bootstrap address is not a broker
    clock.now += 10.5
    fetcher.on_statistics(BROKER_UP)
    fetcher.on_statistics(BROKER_UP)
    assert not view.is_down("local-b")
    assert lines(caplog) == [
        (
            logging.WARNING,
            "stream 'orders': Kafka cluster 'local-b' unreachable: none of its brokers "
            "answers (the client keeps reconnecting; its records wait meanwhile)",
        ),
        # From its first error, not from the statistics that confirmed it.
        (logging.INFO, "stream 'orders': Kafka cluster 'local-b' reachable again after 12.5 s"),
    ]


def test_an_error_its_statistics_do_not_confirm_is_not_told(
    reach: tuple[ClusterReachability, Clock], caplog: pytest.LogCaptureFixture
) -> None:
    """librdkafka raises ``_ALL_BROKERS_DOWN`` in passing as it reconnects ("0/2
    brokers are down"): the client's next statistics show a broker up."""
    view, _ = reach
    client = view.client("local-b")
    client.on_error(KafkaError(KafkaError._ALL_BROKERS_DOWN, "0/2 brokers are down"))
    client.on_statistics(BROKER_UP)
    client.on_statistics(BROKER_DOWN)  # down later, with no error of it yet: not told
    assert not view.is_down("local-b")
    assert lines(caplog) == []


def test_only_a_client_that_reported_the_outage_ends_it(
    reach: tuple[ClusterReachability, Clock], caplog: pytest.LogCaptureFixture
) -> None:
    """Another client's statistics may be from before it lost its brokers."""
    view, _ = reach
    reporting, other = view.client("local-b"), view.client("local-b")
    reporting.on_error(DOWN)
    reporting.on_statistics(BROKER_DOWN)
    other.on_statistics(BROKER_UP)
    assert view.is_down("local-b")
    reporting.on_statistics(BROKER_UP)
    assert not view.is_down("local-b")
    assert [level for level, _ in lines(caplog)] == [logging.WARNING, logging.INFO]


def test_clusters_are_told_apart_and_a_second_outage_is_told_again(
    reach: tuple[ClusterReachability, Clock], caplog: pytest.LogCaptureFixture
) -> None:
    view, _ = reach
    a, b = view.client("local-a"), view.client("local-b")
    for client in (a, b):
        client.on_error(DOWN)
        client.on_statistics(BROKER_DOWN)
    b.on_statistics(BROKER_UP)
    assert view.is_down("local-a") and not view.is_down("local-b")
    b.on_error(DOWN)
    b.on_statistics(BROKER_DOWN)
    told = [message.split(":")[1] for _, message in lines(caplog)]
    assert told == [
        " Kafka cluster 'local-a' unreachable",
        " Kafka cluster 'local-b' unreachable",
        " Kafka cluster 'local-b' reachable again after 0.0 s",
        " Kafka cluster 'local-b' unreachable",
    ]


def test_other_errors_are_debug_and_fatal_ones_errors(
    reach: tuple[ClusterReachability, Clock], caplog: pytest.LogCaptureFixture
) -> None:
    view, _ = reach
    client = view.client("local-a")
    client.on_error(KafkaError(KafkaError._TRANSPORT, "localhost:9092/1: Disconnected"))
    client.on_error(KafkaError(KafkaError._FENCED, "producer fenced", fatal=True))
    client.on_statistics(BROKER_DOWN)
    assert not view.is_down("local-a")
    assert lines(caplog) == [
        (logging.DEBUG, "stream 'orders': Kafka cluster 'local-a': localhost:9092/1: Disconnected"),
        (
            logging.ERROR,
            "stream 'orders': Kafka cluster 'local-a': fatal client error: producer fenced",
        ),
    ]


def test_nothing_is_said_once_the_owner_closes(
    reach: tuple[ClusterReachability, Clock], caplog: pytest.LogCaptureFixture
) -> None:
    """librdkafka reports a client's brokers down as the client is let go."""
    view, _ = reach
    client = view.client("local-a")
    view.close()
    client.on_error(DOWN)
    client.on_statistics(BROKER_DOWN)
    assert lines(caplog) == []
