"""`streamplane generate` and `streamplane pipeline ...`: help, and one clear line on bad input."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

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
