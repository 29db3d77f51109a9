"""Stopping the telemetry job (``TelemetryJob.stop``) between micro-batches, with stand-ins
for the streaming query and the batch's work: no Spark here (the real stop mid-batch is
``tests/integration/pipeline/test_telemetry_stop.py``)."""

from __future__ import annotations

import threading
import time
import traceback
from pathlib import Path
from typing import Any

import pytest

from streamplane.pipeline.telemetry import BatchNotDone, BatchReport, TelemetryConfig, TelemetryJob


class FakeQuery:
    """A streaming query whose stop() cancels the running batch and waits for it to end
    (as Spark does)."""

    def __init__(self, cancelled: threading.Event) -> None:
        self.cancelled = cancelled
        self.active = True
        self.stopped_while: list[Any] = []
        self.job: TelemetryJob | None = None

    @property
    def isActive(self) -> bool:
        return self.active

    @property
    def status(self) -> dict[str, Any]:
        return {"isTriggerActive": False}

    def stop(self) -> None:
        assert self.job is not None
        self.stopped_while.append(self.job.running)
        self.cancelled.set()
        # Spark's stop() waits for the stream thread, which waits for foreachBatch.
        deadline = time.monotonic() + 5
        while self.job.running is not None and time.monotonic() < deadline:
            time.sleep(0.01)
        self.active = False

    def exception(self) -> None:
        return None


def _job(tmp_path: Path) -> TelemetryJob:
    config = TelemetryConfig("s", "g", tmp_path / "w", tmp_path / "c", "http://127.0.0.1:1")
    return TelemetryJob(None, config)


def _run_batch(job: TelemetryJob, batch_id: int, errors: list[BaseException]) -> threading.Thread:
    def run() -> None:
        try:
            job.process_batch(object(), batch_id)
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    while job.running is None and thread.is_alive():
        time.sleep(0.01)
    return thread


def test_a_running_batch_finishes_before_the_query_stops(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = _job(tmp_path)
    release = threading.Event()
    monkeypatch.setattr(job, "_process", lambda batch, bid: release.wait(5) and BatchReport(bid))
    reports: list[BatchReport] = []
    job.on_batch = reports.append
    query = FakeQuery(threading.Event())
    query.job = job
    errors: list[BaseException] = []
    thread = _run_batch(job, 3, errors)
    said: list[str] = []
    threading.Timer(0.4, release.set).start()
    job.stop(query, grace_s=30, reason="--duration 5s reached", say=said.append, note_every_s=0.2)
    thread.join(5)
    assert query.stopped_while == [None]  # between batches
    assert [r.batch_id for r in reports] == [3] and not errors
    assert said[0].startswith("--duration 5s reached: batch 3 is running (")
    assert said[0].endswith("letting it finish, for up to 30s")
    assert any(line.startswith("still waiting for batch 3: ") for line in said[1:])
    assert job.cut_short is None and job.not_started is None
    # A batch Spark starts once the stop was asked for does nothing.
    with pytest.raises(BatchNotDone, match="batch 4 not started"):
        job.process_batch(object(), 4)
    assert job.not_started == 4


def test_the_grace_period_over_the_batch_is_cut_short_in_one_short_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = _job(tmp_path)
    cancelled = threading.Event()

    def work(batch: Any, batch_id: int) -> BatchReport:
        cancelled.wait(10)
        # What a cancelled Spark job raises in Python: tens of kilobytes of Java trace.
        raise RuntimeError("org.apache.spark.SparkException: Job 8 cancelled\n" + "\tat x\n" * 5000)

    monkeypatch.setattr(job, "_process", work)
    query = FakeQuery(cancelled)
    query.job = job
    errors: list[BaseException] = []
    thread = _run_batch(job, 0, errors)
    said: list[str] = []
    started = time.monotonic()
    job.stop(query, grace_s=0.3, reason="Ctrl-C received", say=said.append)
    thread.join(5)
    assert 0.3 <= time.monotonic() - started < 5
    assert query.stopped_while == [(0, pytest.approx(started, abs=1))]
    assert job.cut_short == 0
    assert len(errors) == 1 and isinstance(errors[0], BatchNotDone)
    # What py4j hands back to Spark (whose stream thread matched a regex over it).
    text = "".join(traceback.format_exception(errors[0]))
    assert len(text) < 2000 and "SparkException" not in text
    assert said[0].startswith("Ctrl-C received: batch 0 is running")
    assert said[-1].startswith("batch 0 cut short (the 0.3s grace period ran out, ")
    assert said[-1].endswith(": not committed, it is done again at the next start")
    assert len(said) == 2


def test_no_grace_period_and_a_second_signal_cut_short_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for grace, cut_now, why in ((0.0, None, " (--duration 1s reached, no grace period)"),
                                (60.0, threading.Event(), " on request")):  # fmt: skip
        job = _job(tmp_path)
        cancelled = threading.Event()

        def work(batch: Any, batch_id: int, cancelled: threading.Event = cancelled) -> None:
            cancelled.wait(10)
            raise RuntimeError("cancelled")

        monkeypatch.setattr(job, "_process", work)
        query = FakeQuery(cancelled)
        query.job = job
        errors: list[BaseException] = []
        thread = _run_batch(job, 7, errors)
        if cut_now is not None:
            threading.Timer(0.2, cut_now.set).start()
        said: list[str] = []
        job.stop(query, grace_s=grace, reason="--duration 1s reached", cut_now=cut_now,
                 say=said.append)  # fmt: skip
        thread.join(5)
        assert said[-1].startswith(f"batch 7 cut short{why}: "), said
        assert len(said) == (1 if grace == 0 else 2)


def test_a_stop_between_batches_says_why_and_an_error_of_the_query_is_raised(
    tmp_path: Path,
) -> None:
    job = _job(tmp_path)
    query = FakeQuery(threading.Event())
    query.job = job
    said: list[str] = []
    job.stop(query, reason="SIGTERM received", say=said.append)
    assert query.stopped_while == [None]
    assert said == ["SIGTERM received: stopping the telemetry job"]

    class Failed(FakeQuery):
        def exception(self) -> Any:
            return ValueError("the query's own error")

    job = _job(tmp_path)
    failed = Failed(threading.Event())
    failed.job = job
    with pytest.raises(ValueError, match="own error"):
        job.stop(failed, say=said.append)
