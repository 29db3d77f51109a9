"""await_writable: a created topic counts only once every partition's leader answers."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from confluent_kafka import TopicPartition

from streamplane.exceptions import KafkaError
from streamplane.kafka.admin import await_writable

NOT_OPEN = KafkaError("not open yet", code="NOT_LEADER_FOR_PARTITION", retriable=True)
DENIED = KafkaError("denied", code="TOPIC_AUTHORIZATION_FAILED", retriable=False)


class Leaders:
    """Scripted ListOffsets answers: partition -> how many asks fail before it answers
    (or ``DENIED`` forever); records every ask."""

    def __init__(
        self, not_open_for: Mapping[tuple[str, int], int], denied: Iterable[tuple[str, int]] = ()
    ) -> None:
        self.not_open_for = dict(not_open_for)
        self.denied = set(denied)
        self.asks: list[list[tuple[str, int]]] = []
        self.now = 0.0

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds

    def __call__(
        self, partitions: Sequence[TopicPartition], timeout: float
    ) -> dict[TopicPartition, KafkaError | None]:
        self.asks.append([(tp.topic, tp.partition) for tp in partitions])
        out: dict[TopicPartition, KafkaError | None] = {}
        for tp in partitions:
            key = (tp.topic, tp.partition)
            if key in self.denied:
                out[tp] = DENIED
            elif self.not_open_for.get(key, 0) > 0:
                self.not_open_for[key] -= 1
                out[tp] = NOT_OPEN
            else:
                out[tp] = None
        return out


def tps(*keys: tuple[str, int]) -> list[TopicPartition]:
    return [TopicPartition(t, p) for t, p in keys]


def test_asks_again_only_for_the_partitions_whose_leader_had_not_opened_them() -> None:
    leaders = Leaders({("a", 1): 2})
    failed = await_writable(
        leaders, tps(("a", 0), ("a", 1), ("b", 0)), 5.0, leaders.clock, leaders.sleep
    )
    assert failed == {}
    assert leaders.asks == [[("a", 0), ("a", 1), ("b", 0)], [("a", 1)], [("a", 1)]]
    assert 0 < leaders.now < 0.1  # short backoffs


def test_a_partition_never_open_by_the_deadline_fails_its_topic_only() -> None:
    leaders = Leaders({("a", 1): 10_000})
    failed = await_writable(
        leaders, tps(("a", 0), ("a", 1), ("b", 0)), 2.0, leaders.clock, leaders.sleep
    )
    assert set(failed) == {"a"}
    assert failed["a"].retriable and failed["a"].code == "NOT_LEADER_FOR_PARTITION"
    assert "partition 1" in str(failed["a"]) and "not writable" in str(failed["a"])
    assert leaders.now <= 2.0


def test_a_final_error_stops_asking_for_that_topic() -> None:
    leaders = Leaders({("b", 0): 3}, denied={("a", 0)})
    failed = await_writable(
        leaders, tps(("a", 0), ("a", 1), ("b", 0)), 5.0, leaders.clock, leaders.sleep
    )
    assert failed == {"a": DENIED}
    assert leaders.asks[1:] == [[("b", 0)]] * 3


def test_a_partition_left_unanswered_is_asked_again() -> None:
    answers: list[dict[TopicPartition, KafkaError | None]] = [{}, {TopicPartition("a", 0): None}]
    asked: list[int] = []

    def list_offsets(
        partitions: Sequence[TopicPartition], timeout: float
    ) -> Mapping[TopicPartition, KafkaError | None]:
        asked.append(len(partitions))
        return answers.pop(0)

    assert await_writable(list_offsets, tps(("a", 0)), 5.0, lambda: 0.0, lambda s: None) == {}
    assert asked == [1, 1]


def test_nothing_to_wait_for_asks_nothing() -> None:
    leaders = Leaders({})
    assert await_writable(leaders, [], 5.0, leaders.clock, leaders.sleep) == {}
    assert leaders.asks == []
