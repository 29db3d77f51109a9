"""Table tests of the replication defaults: replicas per cluster size, min.insync.replicas."""

from __future__ import annotations

import pytest

from streamplane.core.replication import (
    DEFAULT_REPLICATION_FACTOR,
    check_min_insync_replicas,
    min_insync_replicas,
    parse_min_insync_replicas,
    replication_factor,
    topic_min_insync_replicas,
)
from streamplane.exceptions import ConfigError


@pytest.mark.parametrize(
    ("live_brokers", "wanted", "expected"),
    [
        (1, None, 1),
        (2, None, 2),
        (3, None, 3),
        (7, None, 3),
        (3, 1, 1),  # asked for: kept
        (5, 5, 5),
        (2, 3, 2),  # capped at the live brokers
        (1, 3, 1),
        (0, None, 1),  # at least 1 (the topic creation then says why it failed)
    ],
)
def test_replication_factor_is_the_wanted_one_capped_at_the_live_brokers(
    live_brokers: int, wanted: int | None, expected: int
) -> None:
    assert replication_factor(live_brokers, wanted) == expected


def test_the_default_is_three_replicas() -> None:
    assert DEFAULT_REPLICATION_FACTOR == 3
    assert replication_factor(10) == DEFAULT_REPLICATION_FACTOR


@pytest.mark.parametrize(("replicas", "expected"), [(1, 1), (2, 1), (3, 2), (4, 2), (5, 2)])
def test_min_insync_replicas_is_two_from_three_replicas(replicas: int, expected: int) -> None:
    assert min_insync_replicas(replicas) == expected


@pytest.mark.parametrize("value", ["0", "-1", "two", "", "1.5"])
def test_a_min_insync_replicas_that_is_not_a_positive_integer_is_refused(value: str) -> None:
    with pytest.raises(ConfigError, match="must be a positive integer"):
        parse_min_insync_replicas(value)


def test_a_min_insync_replicas_above_the_replication_factor_is_refused() -> None:
    check_min_insync_replicas("3", 3)
    check_min_insync_replicas("1", 3)
    with pytest.raises(ConfigError) as err:
        check_min_insync_replicas("3", 2)
    assert str(err.value) == (
        "min.insync.replicas=3 is above the replication factor 2: every write with acks=all "
        "would be refused (set it to at most 2, or leave it out: 1 with 2 replicas)"
    )


@pytest.mark.parametrize(
    ("own", "replicas", "expected"),
    [
        (None, 3, "2"),  # managed
        (None, 1, "1"),
        ("3", 3, "3"),  # the stream's own, kept
        ("1", 3, "1"),
        ("2", 1, "1"),  # capped: topics of a failover to a smaller cluster
        ("3", 2, "2"),
    ],
)
def test_a_topics_min_insync_replicas_is_the_streams_own_capped_else_managed(
    own: str | None, replicas: int, expected: str
) -> None:
    assert topic_min_insync_replicas(own, replicas) == expected
