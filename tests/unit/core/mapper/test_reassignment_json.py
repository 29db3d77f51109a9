from __future__ import annotations

import json

import pytest

from streamplane.core.mapper import (
    MapperError,
    Partition,
    PartitionMap,
    ReassignmentJsonError,
    parse_reassignment_json,
    to_reassignment_json,
)

PM = PartitionMap(
    [Partition("b", 0, (3, 1), 5), Partition("a", 1, (1, 2), 7), Partition("a", 0, (2, 3), 9)]
)


def test_writes_kafka_format_sorted_and_compact() -> None:
    assert to_reassignment_json(PM) == (
        '{"version":1,"partitions":['
        '{"topic":"a","partition":0,"replicas":[2,3]},'
        '{"topic":"a","partition":1,"replicas":[1,2]},'
        '{"topic":"b","partition":0,"replicas":[3,1]}]}'
    )


def test_log_dirs_any_and_explicit() -> None:
    doc = json.loads(to_reassignment_json(PM, log_dirs=True, indent=2))
    assert doc["partitions"][0]["log_dirs"] == ["any", "any"]
    explicit = json.loads(to_reassignment_json(PM, log_dirs={("a", 0): ["/d1", "/d2"]}))
    assert explicit["partitions"][0]["log_dirs"] == ["/d1", "/d2"]
    assert "log_dirs" not in explicit["partitions"][1]
    with pytest.raises(MapperError):
        to_reassignment_json(PM, log_dirs={("a", 0): ["/d1"]})


def test_round_trip_with_sizes_from_current() -> None:
    parsed = parse_reassignment_json(
        to_reassignment_json(PM, log_dirs=True), known_brokers={1, 2, 3}, current=PM
    )
    assert parsed.partition_map == PM
    assert parsed.log_dirs[("b", 0)] == ("any", "any")


def entry(**fields: object) -> dict[str, object]:
    base: dict[str, object] = {"topic": "t", "partition": 0, "replicas": [1, 2]}
    base.update(fields)
    return {k: v for k, v in base.items() if v is not None}


@pytest.mark.parametrize(
    ("document", "problem"),
    [
        ("{nope", "not JSON"),
        ("[]", "JSON object"),
        ({"version": 2, "partitions": []}, "version must be 1"),
        ({"version": True, "partitions": []}, "version must be 1"),
        ({"version": 1}, "'partitions' must be a list"),
        ({"version": 1, "partitions": [], "extra": 1}, "unknown top-level keys"),
        ({"version": 1, "partitions": [5]}, "must be an object"),
        ({"version": 1, "partitions": [entry(bogus=1)]}, "unknown keys"),
        ({"version": 1, "partitions": [entry(topic="")]}, "'topic'"),
        ({"version": 1, "partitions": [entry(partition=-1)]}, "'partition'"),
        ({"version": 1, "partitions": [entry(partition=True)]}, "'partition'"),
        ({"version": 1, "partitions": [entry(), entry()]}, "duplicate partition"),
        ({"version": 1, "partitions": [entry(replicas=[])]}, "non-empty list"),
        ({"version": 1, "partitions": [entry(replicas=[1, 1])]}, "duplicate broker"),
        ({"version": 1, "partitions": [entry(replicas=[1, "2"])]}, "non-negative broker ids"),
        ({"version": 1, "partitions": [entry(replicas=[1, 9])]}, "unknown broker(s) [9]"),
        ({"version": 1, "partitions": [entry(log_dirs=["any"])]}, "lengths must match"),
        ({"version": 1, "partitions": [entry(log_dirs=[1, 2])]}, "'log_dirs'"),
        (
            {"version": 1, "partitions": [entry(), entry(partition=1, replicas=[1, 2, 3])]},
            "inconsistent replication factor",
        ),
    ],
)
def test_parse_rejects(document: object, problem: str) -> None:
    text = document if isinstance(document, str) else json.dumps(document)
    with pytest.raises(ReassignmentJsonError) as caught:
        parse_reassignment_json(text, known_brokers={1, 2, 3})
    assert any(problem in p for p in caught.value.problems), caught.value.problems


def test_parse_reports_every_problem_at_once() -> None:
    doc = {
        "version": 1,
        "partitions": [entry(replicas=[1, 1]), entry(partition=1, replicas=[7, 2])],
    }
    with pytest.raises(ReassignmentJsonError) as caught:
        parse_reassignment_json(json.dumps(doc), known_brokers={1, 2})
    assert len(caught.value.problems) == 2
    assert "invalid reassignment JSON" in str(caught.value)


def test_parse_checks_partitions_against_the_current_map() -> None:
    doc = {"version": 1, "partitions": [entry(topic="zzz")]}
    with pytest.raises(ReassignmentJsonError, match="not a partition of the current map"):
        parse_reassignment_json(json.dumps(doc), current=PM)


def test_mixed_replication_can_be_allowed() -> None:
    doc = {"version": 1, "partitions": [entry(), entry(partition=1, replicas=[1, 2, 3])]}
    parsed = parse_reassignment_json(json.dumps(doc).encode(), allow_mixed_replication=True)
    assert len(parsed.partition_map) == 2
