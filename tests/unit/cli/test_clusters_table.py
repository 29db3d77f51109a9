"""`streamplane clusters list`'s table: the Kafka cluster id and health are columns of their
own."""

from __future__ import annotations

from typing import Any

from streamplane.cli.clusters import clusters_table, health_cell


def test_health_cell() -> None:
    assert health_cell(None) == "unknown"
    assert health_cell({"state": "unknown", "last_error": None}) == "unknown"
    assert health_cell({"state": "ok", "last_error": None}) == "ok"
    down = {"state": "down", "last_error": "connection refused"}
    assert health_cell(down) == "down: connection refused"
    assert health_cell({"state": "degraded", "last_error": None}) == "degraded"


def test_clusters_table_has_kafka_cluster_id_and_health_columns() -> None:
    rows: list[dict[str, Any]] = [
        {
            "name": "a",
            "bootstrap": "h:9092",
            "kafka_cluster_id": "MkU3OEVBNTcwNTJENDM2Qk",
            "tags": {"env": "x"},
            "health": {"state": "down", "last_error": "timed out"},
        },
        {
            "name": "b",
            "bootstrap": "h:9093",
            "kafka_cluster_id": None,  # not learnt yet
            "tags": {},
            "health": {"state": "ok"},
        },
    ]
    lines = clusters_table(rows).splitlines()
    assert lines[0].split("  ")[:3] == ["cluster", "bootstrap", "kafka cluster id"]
    assert lines[0].split()[-2:] == ["health", "tags"]
    assert lines[-2].split()[:3] == ["a", "h:9092", "MkU3OEVBNTcwNTJENDM2Qk"]
    assert "down: timed out" in lines[-2] and lines[-2].rstrip().endswith("env=x")
    assert lines[-1].split() == ["b", "h:9093", "-", "ok", "-"]
