"""`streamplane clusters list`'s table: health is a column of its own."""

from __future__ import annotations

from streamplane.cli.clusters import clusters_table, health_cell


def test_health_cell() -> None:
    assert health_cell(None) == "unknown"
    assert health_cell({"state": "unknown", "last_error": None}) == "unknown"
    assert health_cell({"state": "ok", "last_error": None}) == "ok"
    down = {"state": "down", "last_error": "connection refused"}
    assert health_cell(down) == "down: connection refused"
    assert health_cell({"state": "degraded", "last_error": None}) == "degraded"


def test_clusters_table_has_a_health_column() -> None:
    rows = [
        {
            "name": "a",
            "bootstrap": "h:9092",
            "tags": {"env": "x"},
            "health": {"state": "down", "last_error": "timed out"},
        },
        {"name": "b", "bootstrap": "h:9093", "tags": {}, "health": {"state": "ok"}},
    ]
    lines = clusters_table(rows).splitlines()
    assert lines[0].split() == ["cluster", "bootstrap", "health", "tags"]
    assert "down: timed out" in lines[-2] and lines[-2].rstrip().endswith("env=x")
    assert lines[-1].split() == ["b", "h:9093", "ok", "-"]
