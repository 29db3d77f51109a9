"""``start_query``: a query that dies opening its source because Spark's Python source
process did not connect back within Spark's fixed 10 s is started again; nothing else
is. Stand-in writer and queries (the real failure is checked against Spark in
``tests/integration/pipeline/test_source_process_late.py``)."""

from __future__ import annotations

from typing import Any

from streamplane.pipeline.spark import source_process_late, start_query

# What PySpark's StreamingQueryException said for it (Spark 4.2, a real run).
LATE = (
    "Python worker failed to connect back.\n=== Streaming Query ===\n"
    "Identifier: [id = 3558f373-72c6-4404-a990-2e83bce8a63e, runId = "
    "136addc9-8d16-42f7-a4bf-578d094eeb7d]\nCurrent Committed Offsets: {}\n"
    "Current Available Offsets: {}\n\nCurrent State: INITIALIZING\nThread State: RUNNABLE"
)


class Query:
    def __init__(self, error: str | None, opening_polls: int = 2) -> None:
        self.error = error
        self.polls = 0
        self.opening_polls = opening_polls

    @property
    def isActive(self) -> bool:  # PySpark's name
        return self.error is None or self.polls < self.opening_polls

    @property
    def status(self) -> dict[str, Any]:
        self.polls += 1
        opening = self.polls <= self.opening_polls
        return {"message": "Initializing sources" if opening else "Waiting for data to arrive"}

    def exception(self) -> Exception | None:
        return None if self.error is None else Exception(self.error)


class Writer:
    def __init__(self, *errors: str | None) -> None:
        self.queries = [Query(e) for e in errors]
        self.started: list[Query] = []

    def start(self) -> Query:
        query = self.queries[len(self.started)]
        self.started.append(query)
        return query


def test_a_query_whose_source_process_was_late_is_started_again() -> None:
    said: list[str] = []
    writer = Writer(LATE, None)
    query = start_query(writer, say=said.append)
    assert query is writer.queries[1] and query.isActive
    assert len(writer.started) == 2
    assert len(said) == 1 and "(start 2 of 3)" in said[0], said


def test_at_most_the_attempts_asked_for_and_the_last_failure_is_left_to_see() -> None:
    said: list[str] = []
    writer = Writer(LATE, LATE, LATE, None)
    query = start_query(writer, attempts=3, say=said.append)
    assert query is writer.queries[2] and not query.isActive
    assert len(writer.started) == 3 and len(said) == 2


def test_another_failure_is_not_started_again() -> None:
    said: list[str] = []
    writer = Writer("[STREAM_FAILED] ... ZeroDivisionError", None)
    query = start_query(writer, say=said.append)
    assert query is writer.queries[0] and len(writer.started) == 1 and said == []


def test_a_query_opening_its_sources_is_waited_for() -> None:
    writer = Writer(None)
    query = start_query(writer, say=lambda s: None)
    assert query.polls > query.opening_polls  # returned once it had opened them


def test_the_markers() -> None:
    assert source_process_late(Exception(LATE))
    late = Exception("[STREAM_FAILED] terminated with exception")
    late.desc = "Timed out while waiting for the Python worker to connect back"  # type: ignore[attr-defined]
    assert source_process_late(late)
    assert not source_process_late(Exception("Python worker exited unexpectedly (crashed)"))
