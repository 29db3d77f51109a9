"""`streamplane generate` and `streamplane pipeline ...`: help, and one clear line on bad input."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

CLI = [sys.executable, "-m", "streamplane.cli"]


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, check=False)


def test_help() -> None:
    for args in (
        ["generate", "--help"],
        ["pipeline", "--help"],
        ["pipeline", "telemetry", "--help"],
    ):
        proc = run_cli(*args)
        assert proc.returncode == 0, proc.stderr
        assert "Usage:" in proc.stdout


def test_bad_generate_options() -> None:
    for args, needle in (
        (["--rate", "0"], "--rate"),
        (["--duration", "-1"], "--duration"),
        (["--poison-ratio", "2"], "--poison-ratio"),
    ):
        proc = run_cli("generate", "--stream", "s", *args)
        assert proc.returncode != 0
        assert needle in proc.stderr and "Traceback" not in proc.stderr


def test_unreachable_control_plane_is_one_line() -> None:
    proc = run_cli("generate", "--stream", "s", "--url", "http://127.0.0.1:9", "--duration", "1")
    assert proc.returncode == 1
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error")]
    assert len(errors) == 1 and "unreachable" in errors[0], proc.stderr
    assert "Traceback" not in proc.stderr


def test_bad_telemetry_options_are_one_line_before_spark_starts(tmp_path: Path) -> None:
    """A warehouse under a file, a zero trigger size, an unreachable control plane: one
    line, before the Spark JVM (a 175-line Java trace, a silent 'no limit', 20 s)."""
    afile = tmp_path / "afile"
    afile.write_text("hi")
    base = ["pipeline", "telemetry", "--stream", "s", "--url", "http://127.0.0.1:9"]
    for args, needle in (
        (["--warehouse", str(afile / "wh")], f"{afile} is not a directory"),
        (["--checkpoint", str(afile)], f"{afile} is not a directory"),
        (["--max-records-per-trigger", "0"], "--max-records-per-trigger"),
        (["--warehouse", str(tmp_path / "wh")], "unreachable"),
    ):
        proc = run_cli(*base, *args)
        assert proc.returncode != 0
        assert needle in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
        assert len([x for x in proc.stderr.splitlines() if x.strip()]) <= 3, proc.stderr
    assert not (tmp_path / "wh").exists()


def test_an_unwritable_summary_fails_before_anything_is_sent(tmp_path: Path) -> None:
    afile = tmp_path / "afile"
    afile.write_text("hi")
    proc = run_cli(
        "generate", "--stream", "s", "--url", "http://127.0.0.1:9", "--summary",
        str(afile / "x.json"),
    )  # fmt: skip
    assert proc.returncode == 1
    assert "cannot write the summary" in proc.stderr and "unreachable" not in proc.stderr


class _Query:
    """A streaming query that runs until stopped, with the two calls the CLI makes."""

    def __init__(self) -> None:
        self.stopped = False
        self.waits: list[float] = []

    def awaitTermination(self, timeout: float) -> bool:
        self.waits.append(timeout)
        time.sleep(timeout)
        return self.stopped

    def stop(self) -> None:
        self.stopped = True


def test_ctrl_c_stops_the_telemetry_query_and_gives_back_the_handler() -> None:
    """Ctrl-C while the job runs stops the query (the summary follows) instead of
    raising inside a Py4J call; the handler from before is put back."""
    from streamplane.cli.pipeline import _run_until_stopped

    before = signal.getsignal(signal.SIGINT)
    query = _Query()
    timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    _run_until_stopped(query, duration=None)  # type: ignore[arg-type]
    timer.join()
    assert query.stopped
    assert 1 <= len(query.waits) <= 4
    assert signal.getsignal(signal.SIGINT) is before


def test_duration_stops_the_telemetry_query() -> None:
    from streamplane.cli.pipeline import _run_until_stopped

    query = _Query()
    _run_until_stopped(query, duration=1.2)  # type: ignore[arg-type]
    assert query.stopped
    assert all(0 < wait <= 0.5 for wait in query.waits)  # short waits: Ctrl-C is seen
    assert sum(query.waits) <= 1.2 + 1e-6


def test_an_unwritable_warehouse_is_one_line_even_for_root(tmp_path: Path) -> None:
    """/proc passes os.access(W_OK) for root; creating a directory there fails. Found
    before Spark starts (it dumped a 100-line DELTA_CANNOT_CREATE_LOG_PATH trace)."""
    base = ["pipeline", "telemetry", "--stream", "s", "--url", "http://127.0.0.1:9"]
    for args in (["--warehouse", "/proc/wh"], ["--checkpoint", "/proc/ck"]):
        proc = run_cli(*base, "--warehouse", str(tmp_path / "wh"), *args)
        assert proc.returncode != 0
        assert "/proc is not writable" in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr and "unreachable" not in proc.stderr
        assert len([x for x in proc.stderr.splitlines() if x.strip()]) <= 3, proc.stderr
    assert not list(tmp_path.iterdir())  # the check leaves nothing behind


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


class _SparkQuery(_Query):
    """PySpark's awaitTermination: it sends int(timeout * 1000) milliseconds, and Spark
    refuses 0; the wait is in whole milliseconds on a fake clock."""

    def __init__(self, clock: _Clock) -> None:
        super().__init__()
        self.clock = clock

    def awaitTermination(self, timeout: float) -> bool:
        millis = int(timeout * 1000)
        if millis <= 0:
            raise ValueError("requirement failed: Timeout has to be positive")
        self.waits.append(timeout)
        self.clock.now += millis / 1000
        return False


@pytest.mark.parametrize("duration", [0.0005, 0.0015, 1.2345678, 0.0])
def test_duration_ends_cleanly_when_less_than_a_millisecond_is_left(
    duration: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--duration 0.0005 ended with a Py4J IllegalArgumentException traceback."""
    from streamplane.cli import pipeline as cli

    clock = _Clock()
    monkeypatch.setattr(cli, "time", clock)
    query = _SparkQuery(clock)
    cli._run_until_stopped(query, duration=duration)  # type: ignore[arg-type]
    assert query.stopped
    assert clock.now - 1000.0 <= duration


class _FakeProducer:
    """``StreamProducer`` for ``generate``: keeps the keys it is given in ``sent``."""

    def __init__(self, sent: list[bytes]) -> None:
        self.sent = sent
        self.routing = type("Routing", (), {"lanes": ["realtime", "bulk"]})()

    def __enter__(self) -> _FakeProducer:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def send(self, value: bytes, key: bytes, lane: str) -> None:
        self.sent.append(key)

    def flush(self) -> None:
        return None


@pytest.fixture
def fake_stream(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """The keys ``generate`` sends (to no Kafka)."""
    import contextlib

    from streamplane.cli import pipeline as cli

    sent: list[bytes] = []
    monkeypatch.setattr(cli, "StreamProducer", lambda stream, client: _FakeProducer(sent))
    monkeypatch.setattr(cli, "connect", lambda url, token: contextlib.nullcontext(object()))
    return sent


def _generate(*args: str) -> tuple[list[str], str]:
    from click.testing import CliRunner

    from streamplane.cli.pipeline import generate

    result = CliRunner().invoke(generate, ["--stream", "s", "--rate", "2000", *args])
    assert result.exit_code == 0, result.output
    return result.stderr.splitlines(), result.stdout


def test_each_generate_run_has_its_own_event_ids_unless_seeded(fake_stream: list[bytes]) -> None:
    """Two runs with the default seed sent the same event ids: the second run's events
    were dropped by the store as duplicates."""
    runs = []
    for _ in range(2):
        fake_stream.clear()
        lines, out = _generate("--duration", "0.05")
        runs.append((set(fake_stream), json.loads(out)["seed"], lines[0]))
    (first, seed, started), (second, _, _) = runs
    assert len(first) == 100 and not first & second
    assert f"(seed {seed}: --seed {seed} sends this run again)" in started
    fake_stream.clear()
    _generate("--duration", "0.05", "--seed", str(seed))
    assert set(fake_stream) == first  # --seed repeats a run


def test_generate_reports_progress_while_it_sends(
    fake_stream: list[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    from streamplane.cli import pipeline as cli

    monkeypatch.setattr(cli, "PROGRESS_EVERY_S", 0.2)
    lines, _ = _generate("--duration", "1", "--seed", "3")
    ticks = [line for line in lines if line.startswith("… sent ")]
    assert 2 <= len(ticks) <= 6, lines
    assert all(" of 2,000 events (" in line and line.endswith("/s)") for line in ticks)
